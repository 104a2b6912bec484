"""The engine process: the curriculum loop, the only LMDB writer, and the hub every message passes through.

Each step s (0-based):
1. if s % k == 0: refresh. Pick the active skills (round-robin), and for every slot ask a worker for a design
   grounded on a fresh passage and memory examples; retry failed slots with new passages; store every attempt
   (valid or rejected, with its verdict); a slot left empty plays an earlier valid environment of its skill.
2. wait until the learner is at most `run.max_staleness` versions behind the version that will train step s's
   batch (admission control); agent samples found staler than that when the batch is built are dropped.
3. play every active environment G times without and H times with its hint; store the trajectories.
4. agent advantages (z-score per environment and arm); designer samples whose reward fell due at s join them;
   send the batch to the learner, which publishes version s + 1.
5. if the window of the environments made at s + 1 - k closes, compute their designer rewards (due at s + 1);
   after a refresh step, update the environment memory from the step's plays.
A last batch of designer samples whose reward falls due after the final step is flushed at the end, as the
reference does. Metrics go to `metrics.jsonl` as each update lands.
"""

from __future__ import annotations

import json
import random
import time
import zlib
from collections import defaultdict

import msgspec
import trio
import zmq

from engine.config import Config
from engine.curriculum import ActiveEnv, PassageSampler, SeedEnvironment, active_skills, env_class_name, load_corpus, skill_description, slot_skills, truncate_words
from engine.dispatch import Dispatcher, WorkerState
from engine.feedback import close_window, update_memory
from engine.live import LiveView
from engine.messages import (
    DesignResult,
    DesignTask,
    Heartbeat,
    HelloAgain,
    LearnerFailed,
    LearnerHello,
    LearnerToEngine,
    PlayResult,
    PlayTask,
    PolicyPublished,
    PolicyUpdate,
    Sample,
    Shutdown,
    TaskFailed,
    TrainBatch,
    WorkerBye,
    WorkerHello,
    WorkerToEngine,
)
from engine.paths import RunPaths
from engine.processes import Child, ChildFailed, learner_child, supervise, worker_child
from engine.rewards import group_advantages, learnable, mean
from engine.transport import MessageSocket, ProtocolError, open_socket
from storage.memory import negative_lines, positive_examples
from storage.records import (
    BatchEntry,
    BatchRecord,
    EnvironmentRecord,
    MemoryRecord,
    RunState,
    TrajectoryRecord,
    check_sample,
    unpack_ints,
)
from storage.store import Store, trajectory_key


class EngineError(RuntimeError):
    pass


def drop_stale(samples: list[Sample], trained_at: int, bound: int) -> tuple[list[Sample], int]:
    """Agent samples with a token sampled more than `bound` versions before `trained_at` (the learner's version
    when it trains this batch: the batch's index) are dropped and counted, never trained on. Designer samples are
    late by design (k steps) and exempt; the objective's correction handles them."""
    kept = []
    for sample in samples:
        versions = unpack_ints(sample.versions)
        sampled = versions[versions >= 0]
        if sample.role == "agent" and sampled.size and trained_at - int(sampled.min()) > bound:
            continue
        kept.append(sample)
    return kept, len(samples) - len(kept)


def play_seed(run_seed: int, env_id: str, step: int, arm: str, index: int) -> int:
    return zlib.crc32(f"{run_seed}:{env_id}:{step}:{arm}:{index}".encode()) & 0x7FFFFFFF


class Engine:
    def __init__(self, config: Config, paths: RunPaths, seeds: list[SeedEnvironment], *, view: LiveView):
        self.config = config
        self.paths = paths
        self.seeds = seeds
        self.view = view
        self.store = Store.open(paths.store)
        corpus = load_corpus(config.curriculum.corpus or None)
        self.sampler = PassageSampler(corpus, seed=config.run.seed)
        self.rng = random.Random(config.run.seed)
        self.k = config.curriculum.refresh_interval
        self.policy_version = 0
        self.policy_path = ""
        self._policy_changed = trio.Event()
        self._learner_ident: bytes | None = None
        self._learner_ready = trio.Event()
        self._worker_ready = trio.Event()
        self.stopping = False
        self.children: list[Child] = []
        self.step_stats: dict[int, dict] = {}
        self.batches_sent = 0
        self.extra_batches = 0  # batches tied to no step: the final designer flush of a finished run now extended
        self.learner_metrics: dict[int, dict] = {}
        self.designer_due: dict[int, list[Sample]] = defaultdict(list)
        self.isolation = ""
        self.worker_sock: MessageSocket | None = None
        self.learner_sock: MessageSocket | None = None
        self.dispatcher: Dispatcher | None = None
        self._progress = {"label": "", "done": 0, "total": 0}

    # ------------------------------------------------------------------ sockets
    async def _receive_workers(self) -> None:
        assert self.worker_sock and self.dispatcher
        while True:
            try:
                ident, message = await self.worker_sock.receive_from()
            except ProtocolError as exc:
                self.view.line(f"warning: ignored a malformed worker message: {exc}")
                continue
            match message:
                case WorkerHello():
                    self.dispatcher.add_worker(
                        WorkerState(
                            ident=ident,
                            worker_id=message.worker_id,
                            slots=message.slots,
                            isolation=message.isolation,
                            backend=message.backend,
                            policy_version=message.policy_version,
                            last_seen=time.monotonic(),
                        )
                    )
                    self._note_isolation(message.isolation)
                    self.view.line(f"worker {message.worker_id} joined (backend {message.backend}, sandbox {message.isolation}, {message.slots} slots)")
                    # Always answered: it tells the worker an engine is there, and which policy is current.
                    await self.worker_sock.send_to(ident, PolicyUpdate(version=self.policy_version, path=self.policy_path))
                    self._worker_ready.set()
                case Heartbeat():
                    if self.dispatcher.seen(ident, message.policy_version) is None:  # e.g. attached before a restart
                        await self.worker_sock.send_to(ident, HelloAgain())
                case DesignResult() | PlayResult():
                    try:
                        check_sample(message.designer if isinstance(message, DesignResult) else message.agent)
                    except ValueError as exc:  # a broken worker: its answer counts as a failed task
                        self.view.line(f"warning: worker {message.worker_id} sent a malformed sample: {exc}")
                        message = TaskFailed(task_id=message.task_id, worker_id=message.worker_id, reason=f"malformed sample: {exc}")
                    self.dispatcher.complete(ident, message)
                case TaskFailed():
                    self.dispatcher.complete(ident, message)
                case WorkerBye():
                    self.dispatcher.drop_worker(ident)

    async def _receive_learner(self) -> None:
        assert self.learner_sock
        while True:
            try:
                ident, message = await self.learner_sock.receive_from()
            except ProtocolError as exc:
                self.view.line(f"warning: ignored a malformed learner message: {exc}")
                continue
            match message:
                case LearnerHello():
                    self._learner_ident = ident
                    self.policy_version = message.policy_version  # > 0 when it resumed from a checkpoint
                    self.policy_path = message.policy_path
                    if message.policy_version > 0:
                        await self.dispatcher.broadcast(PolicyUpdate(version=message.policy_version, path=message.policy_path))
                    self._learner_ready.set()
                case PolicyPublished():
                    self.policy_version = message.version
                    self.policy_path = message.path
                    self.learner_metrics[message.step] = message.metrics
                    await self.dispatcher.broadcast(PolicyUpdate(version=message.version, path=message.path))
                    with self.store.batch() as batch:
                        state = self.store.state()
                        state.policy_version = message.version
                        batch.put_state(state)
                    self._write_metrics(message.step)
                    self._policy_changed.set()
                    self._policy_changed = trio.Event()
                case LearnerFailed():
                    raise EngineError(f"the learner failed: {message.reason} (see {self.paths.logs / 'learner.log'})")

    def _note_isolation(self, level: str) -> None:
        if level != self.isolation:
            self.isolation = level
            self.paths.update_meta(sandbox_isolation=level)
            if not level.startswith("bubblewrap"):
                self.view.line(f"WARNING: the sandbox runs with weak isolation ({level}); install bubblewrap for full isolation")

    def batch_index(self, step: int) -> int:
        """The index of step's training batch, which is the learner's policy version when it trains that batch."""
        return step + self.extra_batches

    async def wait_for_version(self, version: int, label: str) -> None:
        while self.policy_version < version:
            self.view.status(f"{label}: waiting for policy v{version} (learner at v{self.policy_version})")
            await self._policy_changed.wait()

    # ------------------------------------------------------------------ tasks
    def _on_result(self, result) -> None:
        self._progress["done"] += 1
        p = self._progress
        self.view.status(f"{p['label']} {p['done']}/{p['total']}")

    async def _run_tasks(self, label: str, tasks: list) -> list:
        self._progress = {"label": label, "done": 0, "total": len(tasks)}
        self.view.status(f"{label} 0/{len(tasks)}")
        started = time.monotonic()
        results = await self.dispatcher.run_tasks(tasks)
        if not self.view.live:
            failed = sum(1 for r in results if isinstance(r, TaskFailed))
            self.view.line(f"{label}: {len(results)} done in {time.monotonic() - started:.0f} s" + (f" ({failed} failed)" if failed else ""))
        return results

    # ------------------------------------------------------------------ refresh
    def _seed_memory(self) -> None:
        existing = {r.env_id for r in self.store.memory()}
        with self.store.batch() as batch:
            for seed in self.seeds:
                env_id = f"seed-{seed.name}"
                if self.store.environment(env_id) is None:
                    batch.put_environment(
                        EnvironmentRecord(
                            env_id=env_id, skill=seed.skill, step_created=-1, source="seed", passage_id="", attempt=0,
                            code=seed.code, reply="", hint=seed.hint, valid=True, reason="", checks=[],
                            designer_sample_id="", worker_id="", created_at=time.time(),
                        )
                    )
                if env_id not in existing:
                    batch.put_memory(
                        MemoryRecord(env_id=env_id, skill=seed.skill, name=env_class_name(seed.code), code=seed.code, win_rate=0.5, regret=0.0, step=-1, source="seed")
                    )

    def _design_task(self, step: int, slot: int, skill: str, attempt: int, memory: list[MemoryRecord]) -> DesignTask:
        c = self.config.curriculum
        passage = self.sampler.sample()
        return DesignTask(
            task_id=f"s{step:04d}-e{slot:02d}-a{attempt}",
            skill=skill,
            skill_description=skill_description(skill),
            passage_id=passage.passage_id,
            passage=truncate_words(passage.text, c.max_passage_words),
            examples=positive_examples(memory, skill, c.memory_positives, self.rng, c.example_code_chars),
            negatives=negative_lines(memory, skill, c.memory_negatives, self.rng),
            attempt=attempt,
            step=step,
        )

    def _reuse(self, skill: str, taken: set[str]) -> ActiveEnv | None:
        """An earlier valid environment of this skill not already active (newest designed first, then seeds)."""
        valid = [e for e in self.store.environments() if e.valid and e.env_id not in taken]
        candidates = [e for e in valid if e.skill == skill] or [e for e in valid if e.source == "seed"]
        if not candidates:
            return None
        e = max(candidates, key=lambda e: (e.source == "designed", e.step_created, e.env_id))
        return ActiveEnv(env_id=e.env_id, skill=e.skill, code=e.code, hint=e.hint, designed_now=False, class_name=env_class_name(e.code))

    async def refresh(self, step: int) -> tuple[list[ActiveEnv], int, int, int]:
        c = self.config.curriculum
        skills = slot_skills(active_skills(c.skills, c.skills_per_refresh, step // self.k), c.envs_per_step)
        memory = list(self.store.memory())
        chosen: list[ActiveEnv | None] = [None] * len(skills)
        requested = tokens = 0
        for attempt in range(1, c.design_attempts + 1 if c.design else 1):
            open_slots = [i for i, env in enumerate(chosen) if env is None]
            if not open_slots:
                break
            tasks = [self._design_task(step, i, skills[i], attempt, memory) for i in open_slots]
            requested += len(tasks)
            results = await self._run_tasks(f"step {step + 1}: designs (attempt {attempt})", tasks)
            with self.store.batch() as batch:
                for slot, task, result in zip(open_slots, tasks, results):
                    record = self._design_record(task, result)
                    batch.put_environment(record)
                    if isinstance(result, DesignResult):
                        tokens += result.tokens_generated
                        batch.put_trajectory(
                            TrajectoryRecord(
                                sample_id=result.designer.sample_id, role="designer", env_id=record.env_id, skill=task.skill,
                                arm="design", step=step, seed=0, status="designed" if result.valid else "rejected",
                                failure=result.reason, episode_return=0.0, turns=[], sample=result.designer, created_at=time.time(),
                            )
                        )
                    if record.valid:
                        chosen[slot] = ActiveEnv(env_id=record.env_id, skill=record.skill, code=record.code, hint=record.hint, designed_now=True, class_name=env_class_name(record.code))
        valid = sum(1 for env in chosen if env is not None)
        for i, env in enumerate(chosen):
            if env is None and (c.reuse_valid_envs or not c.design):
                chosen[i] = self._reuse(skills[i], {e.env_id for e in chosen if e is not None})
        active = [env for env in chosen if env is not None]
        return active, requested, valid, tokens

    def _design_record(self, task: DesignTask, result) -> EnvironmentRecord:
        if isinstance(result, DesignResult):
            return EnvironmentRecord(
                env_id=task.task_id, skill=task.skill, step_created=task.step, source="designed", passage_id=task.passage_id,
                attempt=task.attempt, code=result.code, reply=result.reply, hint=result.hint, valid=result.valid,
                reason=result.reason, checks=result.checks, designer_sample_id=result.designer.sample_id,
                worker_id=result.worker_id, created_at=time.time(),
            )
        return EnvironmentRecord(
            env_id=task.task_id, skill=task.skill, step_created=task.step, source="designed", passage_id=task.passage_id,
            attempt=task.attempt, code="", reply="", hint="", valid=False, reason=f"worker error: {result.reason}",
            checks=[], designer_sample_id="", worker_id=result.worker_id, created_at=time.time(),
        )

    # ------------------------------------------------------------------ plays
    def _play_tasks(self, step: int, active: list[ActiveEnv]) -> list[PlayTask]:
        p = self.config.play
        tasks = []
        for env in active:
            for arm, count in (("no_hint", p.plays_per_env), ("hint", p.hint_plays_per_env)):
                for i in range(count):
                    tasks.append(
                        PlayTask(
                            task_id=f"s{step:04d}-{env.env_id}-{arm}-{i:02d}",
                            env_id=env.env_id, skill=env.skill, code=env.code, hint=env.hint if arm == "hint" else "",
                            arm=arm, seed=play_seed(self.config.run.seed, env.env_id, step, arm, i), step=step,
                        )
                    )
        return tasks

    def _store_plays(self, step: int, results: list) -> list[PlayResult]:
        plays = [r for r in results if isinstance(r, PlayResult)]
        with self.store.batch() as batch:
            for r in plays:
                batch.put_trajectory(
                    TrajectoryRecord(
                        sample_id=r.agent.sample_id, role="agent", env_id=r.env_id, skill=r.agent.skill, arm=r.arm, step=step,
                        seed=r.seed, status=r.status, failure=r.failure, episode_return=r.episode_return, turns=r.turns,
                        sample=r.agent, created_at=time.time(),
                    )
                )
        return plays

    @staticmethod
    def agent_samples(plays: list[PlayResult]) -> tuple[list[Sample], int]:
        groups: dict[tuple[str, str], list[PlayResult]] = defaultdict(list)
        for r in plays:
            if r.status != "failed":
                groups[(r.env_id, r.arm)].append(r)
        samples, zero_groups = [], 0
        for members in groups.values():
            advantages = group_advantages([r.episode_return for r in members])
            if all(a == 0.0 for a in advantages):
                zero_groups += 1
            samples += [msgspec.structs.replace(r.agent, advantage=a) for r, a in zip(members, advantages)]
        return samples, zero_groups

    # ------------------------------------------------------------------ learner
    async def send_batch(self, step: int, samples: list[Sample], checkpoint: bool, active: list[ActiveEnv] | None = None) -> None:
        """Record the batch (and the run state after this step) in one transaction, then send it."""
        record = BatchRecord(
            index=self.batches_sent, step=step, checkpoint=checkpoint,
            entries=[BatchEntry(trajectory_key(s.step, s.sample_id), s.advantage, s.reward) for s in samples],
        )
        with self.store.batch() as batch:
            batch.put_batch(record)
            state = self.store.state()
            state.batches = self.batches_sent + 1
            state.policy_version = self.policy_version
            state.isolation = self.isolation
            if active is not None:
                state.steps_done = step + 1
                state.active_env_ids = [e.env_id for e in active]
                state.refresh_step = step - step % self.k
            batch.put_state(state)
        await self.learner_sock.send_to(self._learner_ident, TrainBatch(step=step, samples=samples, checkpoint=checkpoint))
        self.batches_sent += 1

    def _batch_samples(self, record: BatchRecord) -> list[Sample]:
        samples = []
        for entry in record.entries:
            trajectory = self.store.trajectory(entry.trajectory_key)
            if trajectory is None:
                raise EngineError(f"batch {record.index} names trajectory {entry.trajectory_key}, which is not in the store")
            samples.append(msgspec.structs.replace(trajectory.sample, advantage=entry.advantage, reward=entry.reward))
        return samples

    async def catch_up_learner(self) -> None:
        """Resend, from LMDB, every recorded batch the (restarted) learner has not applied yet."""
        records = list(self.store.batches())
        self.batches_sent = len(records)
        missing = [r for r in records if r.index >= self.policy_version]
        if missing:
            self.view.line(f"resume: the learner is at v{self.policy_version}; resending {len(missing)} recorded batches from the store")
        for record in missing:
            await self.learner_sock.send_to(self._learner_ident, TrainBatch(step=record.step, samples=self._batch_samples(record), checkpoint=record.checkpoint))
        await self.wait_for_version(len(records), "resume: learner catching up")

    def restore(self, state: RunState) -> list[ActiveEnv]:
        """The active environments and the delayed designer samples of an interrupted run."""
        active = []
        for env_id in state.active_env_ids:
            env = self.store.environment(env_id)
            if env is None:
                raise EngineError(f"the run state names environment {env_id}, which is not in the store")
            designed_now = env.source == "designed" and env.step_created == state.refresh_step
            active.append(ActiveEnv(env_id=env.env_id, skill=env.skill, code=env.code, hint=env.hint, designed_now=designed_now, class_name=env_class_name(env.code)))
        # Designer samples due at the next step (steps_done): their window closed at the last committed step. A
        # reward due later was computed by a step that is not committed; that step is played again and recomputes it.
        trained = {entry.trajectory_key for record in self.store.batches() for entry in record.entries}
        for reward in self.store.designer_rewards():
            key = trajectory_key(reward.env_step, reward.designer_sample_id)
            if reward.reward_step == state.steps_done and self.config.reward.train_designer and key not in trained:
                trajectory = self.store.trajectory(key)
                if trajectory is not None:
                    self.designer_due[reward.reward_step].append(msgspec.structs.replace(trajectory.sample, reward=reward.raw_reward, advantage=reward.advantage))
        self.sampler.reseed(self.config.run.seed + 7919 * state.steps_done)
        return active

    def _write_metrics(self, step: int) -> None:
        stats = self.step_stats.get(step, {"step": step})
        learner = self.learner_metrics.get(step, {})
        row = {
            **stats,
            "policy_version": self.policy_version,
            "learner_loss": learner.get("loss", 0.0),
            "staleness": learner.get("staleness", 0.0),
            "learner": learner,
            "time": time.time(),
        }
        with open(self.paths.metrics, "a") as f:
            f.write(json.dumps(row) + "\n")
        if "envs_requested" in row:
            self.view.step_line(row)
        else:
            self.view.line(f"flush update (designer samples of step {step}): v{self.policy_version} loss {row['learner_loss']:+.4f}")

    # ------------------------------------------------------------------ the loop
    async def curriculum(self) -> None:
        cfg = self.config
        steps = cfg.run.steps
        self._seed_memory()
        state = self.store.state()
        first = state.steps_done
        self.paths.update_meta(curriculum_started=time.time())
        active = self.restore(state) if first else []
        if first:
            self.view.line(f"resume: {first} steps done; continuing at step {first + 1} of {steps}")
        await self.catch_up_learner()
        self.extra_batches = self.batches_sent - first
        step = first
        while step < steps:
            epoch_end = min(steps, (step // self.k + 1) * self.k)
            designs = (0, 0, 0)
            epoch_started = time.monotonic()
            if step % self.k == 0:
                await self.wait_for_version(self.batch_index(step) - cfg.run.max_staleness, f"step {step + 1}")
                active, requested, valid, design_tokens = await self.refresh(step)
                designs = (requested, valid, design_tokens)
            if not active:
                raise EngineError("no valid environment to play: every design failed and there are no seed environments")
            await self.run_epoch(range(step, epoch_end), active, designs, epoch_started)
            step = epoch_end
        flush = self.designer_due.pop(steps, [])
        if flush:  # designer samples whose reward fell due after the last step (the reference flushes them too)
            await self.send_batch(steps, flush, checkpoint=True)
        await self.wait_for_version(self.batches_sent, "final update")
        with self.store.batch() as batch:
            state = self.store.state()
            state.finished = True
            state.policy_version = self.policy_version
            batch.put_state(state)

    async def run_epoch(self, steps: range, active: list[ActiveEnv], designs: tuple[int, int, int], epoch_started: float) -> None:
        """The steps between two refreshes. A step's plays start as soon as admission allows (the learner at most
        `run.max_staleness` versions behind it), so with a bound above 0 later steps play while earlier ones
        finish and train; each step's batch is built and sent in step order once its plays are in."""
        bound = self.config.run.max_staleness
        done = {step: trio.Event() for step in steps}
        results: dict[int, list] = {}
        started: dict[int, float] = {}

        async def play(step: int) -> None:
            results[step] = await self._run_tasks(f"step {step + 1}: plays", self._play_tasks(step, active))
            done[step].set()

        async def admit(nursery) -> None:
            for step in steps:
                await self.wait_for_version(self.batch_index(step) - bound, f"step {step + 1}")
                started[step] = epoch_started if step == steps.start else time.monotonic()  # a refresh counts
                nursery.start_soon(play, step)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(admit, nursery)
            for step in steps:
                await done[step].wait()
                requested, valid, design_tokens = designs if step == steps.start else (0, 0, 0)
                await self.finish_step(step, results.pop(step), active, requested, valid, design_tokens, time.monotonic() - started[step])

    async def finish_step(self, step, results, active, envs_requested, envs_valid, design_tokens, seconds) -> None:
        plays = self._store_plays(step, results)
        samples, zero_groups = self.agent_samples(plays)
        samples, too_stale = drop_stale(samples, self.batches_sent, self.config.run.max_staleness)
        for reward in close_window(self.store, self.config.reward, self.k, step, len(samples)):
            if reward.sample is not None:
                self.designer_due[reward.record.reward_step].append(reward.sample)
        if step % self.k == 0:
            update_memory(self.store, self.config.curriculum, step, active, plays)
        due = self.designer_due.pop(step, [])
        tokens = design_tokens + sum(r.tokens_generated for r in plays)
        stats = self._stats(step, plays, results, samples, due, zero_groups, envs_requested, envs_valid, seconds, tokens)
        self.step_stats[step] = {**stats, "dropped_stale": too_stale}
        last = step == self.config.run.steps - 1
        await self.send_batch(step, samples + due, checkpoint=last and not self.designer_due.get(self.config.run.steps), active=active)

    def _stats(self, step, plays, results, samples, due, zero_groups, envs_requested, envs_valid, seconds, tokens) -> dict:
        returns = defaultdict(list)
        per_env = defaultdict(list)
        for r in plays:
            if r.status != "failed":
                returns[r.arm].append(r.episode_return)
                if r.arm == "no_hint":
                    per_env[r.env_id].append(1.0 if r.episode_return > 0 else 0.0)
        win = {arm: mean([1.0 if x > 0 else 0.0 for x in values]) for arm, values in returns.items()}
        env_win = [mean(v) for v in per_env.values()]
        parse_rules = defaultdict(int)
        for r in plays:
            for t in r.turns:
                parse_rules[t.parse_rule] += 1
        return {
            "step": step,
            "refresh": step % self.k == 0,
            "env_slots": self.config.curriculum.envs_per_step,
            "envs_requested": envs_requested,  # design attempts at this step's refresh (0 between refreshes)
            "envs_valid": envs_valid,
            "active_envs": len(per_env),
            "plays": len(plays),
            "plays_failed": sum(1 for r in plays if r.status == "failed") + sum(1 for r in results if isinstance(r, TaskFailed)),
            "win_rate_no_hint": win.get("no_hint", 0.0),
            "win_rate_hint": win.get("hint", 0.0),
            "mean_return_no_hint": mean(returns["no_hint"]),
            "mean_return_hint": mean(returns["hint"]),
            "mean_regret": mean(returns["hint"]) - mean(returns["no_hint"]),
            "learnable_share": mean([1.0 if learnable(w) else 0.0 for w in env_win]),
            "agent_samples": len(samples),
            "designer_samples": len(due),
            "zero_variance_groups": zero_groups,
            "tokens_generated": tokens,
            "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
            "step_seconds": seconds,
            "parse_rules": dict(parse_rules),
            "sandbox": self.isolation,
        }

    async def run(self) -> None:
        paths = self.paths
        async with (
            open_socket(zmq.ROUTER, self.config.worker.address or paths.worker_address, bind=True, decode=WorkerToEngine) as worker_sock,
            open_socket(zmq.ROUTER, paths.learner_address, bind=True, decode=LearnerToEngine) as learner_sock,
            trio.open_nursery() as nursery,
        ):
            self.worker_sock, self.learner_sock = worker_sock, learner_sock
            self.dispatcher = Dispatcher(worker_sock, on_result=self._on_result)
            await nursery.start(self.dispatcher.run)
            nursery.start_soon(self._receive_workers)
            nursery.start_soon(self._receive_learner)
            nursery.start_soon(self.dispatcher.watch_liveness, self.config.worker.dead_after_s, self._worker_dead)
            self._start_children(nursery)
            self.view.status("starting the learner and rollout workers (loading the model)")
            await self._learner_ready.wait()
            await self._worker_ready.wait()
            try:
                await self.curriculum()
            finally:
                self.stopping = True
                with trio.move_on_after(5) as scope:
                    scope.shield = True
                    await self.dispatcher.broadcast(Shutdown(reason="run finished"))
                    if self._learner_ident is not None:
                        await self.learner_sock.send_to(self._learner_ident, Shutdown(reason="run finished"))
                    await trio.sleep(0.2)
            nursery.cancel_scope.cancel()

    def _worker_dead(self, state: WorkerState) -> None:
        self.view.line(f"warning: worker {state.worker_id} went silent; its tasks were requeued")

    def _start_children(self, nursery) -> None:
        learner = learner_child(self.paths, self.config.learner.world_size)
        self.children.append(learner)
        nursery.start_soon(lambda: supervise(learner, restartable=False, max_restarts=0, on_exit=self._child_exit, stopping=lambda: self.stopping))
        for i in range(self.config.worker.count):
            worker = worker_child(self.paths, f"w{i}")
            self.children.append(worker)
            nursery.start_soon(lambda w=worker: supervise(w, restartable=True, max_restarts=3, on_exit=self._child_exit, stopping=lambda: self.stopping))

    def _child_exit(self, child: Child, code: int) -> None:
        self.view.line(f"warning: {child.name} exited with code {code} (log: {child.log})")
        if child.name.startswith("worker-") and self.dispatcher is not None:
            for ident, state in list(self.dispatcher.workers.items()):
                if f"worker-{state.worker_id}" == child.name:
                    self.dispatcher.drop_worker(ident)

    def stop_children(self) -> None:
        for child in self.children:
            child.stop()
        self.store.close()


__all__ = ["Engine", "EngineError", "ChildFailed"]
