"""The engine process: the hub every message passes through, and the curriculum loop. The only LMDB writer.

Each step s (0-based):
1. if s % k == 0: refresh (engine/refresh.py): new environments designed by the workers, stored with their
   verdicts; a slot left empty plays an earlier valid environment of its skill.
2. wait until the learner is at most `run.max_staleness` versions behind the policy version that will train
   step s's batch (admission control).
3. play every active environment G times without its hint, and H times with it at a refresh step for the
   environments made there (`play.hint_plays`; engine/plays.py); store them; retire environments that hung.
4. build the batch (engine/batches.py): agent advantages of the unhinted plays (`play.train_hint_plays` adds
   the hinted), stale samples dropped, the designer samples whose
   reward fell due at s (engine/designer_queue.py); record it and send it to the learner, which publishes the
   next policy version.
5. close the k-step window of the environments made at s + 1 - k: their designer rewards, due at s + 1; after
   a refresh step, update the environment memory (engine/feedback.py).
A last batch of designer samples whose reward falls due after the final step is flushed at the end, as the
reference does. Metrics go to `metrics.jsonl` (engine/metrics/steps.py) as each update lands.

Policy versions: the learner publishes `policy_version`; batch i is trained by version i and makes i + 1, so
`target_version` (the batches sent) is where the learner will be once it has trained them all, and step s's
batch is trained by version `training_version(s)` = s + `version_offset` (versions tied to no step: the final
designer flush of a finished run that is now extended).
"""

from __future__ import annotations

import math
import random
import time

import trio

from engine.batches import (
    MissingTrajectory,
    agent_samples,
    batch_record,
    drop_stale,
    stored_batch_samples,
)
from engine.protocol.config import Config
from engine.curriculum import ActiveEnv, PassageSampler, SeedEnvironment, load_corpus
from engine.designer_queue import DesignerQueue
from engine.peers.bus import Bus
from engine.peers.dispatch import Dispatcher, WorkerState
from engine.evaluation import InLoopEval
from engine.protocol.errors import RunFailed
from engine.feedback import close_window, update_memory
from engine.metrics.live import LiveView
from engine.protocol.messages import (
    DesignResult,
    FetchChunk,
    FetchManifest,
    FetchRunInfo,
    Heartbeat,
    HelloAgain,
    LearnerFailed,
    LearnerHello,
    PlayResult,
    PolicyPublished,
    PolicyUpdate,
    RunInfo,
    Sample,
    Shutdown,
    TaskFailed,
    TrainBatch,
    WorkerBye,
    WorkerHello,
    ValidateResult,
)
from engine.metrics.curriculum_signals import curriculum_metrics
from engine.metrics.steps import MetricsLog, StepOutcome, step_metrics, window_share
from engine.protocol.paths import RunPaths
from engine.plays import play_tasks, store_plays
from engine.peers.policy_transfer import PolicyServer
from engine.peers.processes import Child, ChildFailed, learner_child, supervise, worker_child
from engine.refresh import Designs, RefreshResult
from engine.peers.result_checks import ResultGate
from engine.protocol.transport import MessageSocket, ProtocolError, short_id
from engine.metrics.trackers import log_to_trackers
from storage.records import RunState
from storage.store import Store


class EngineError(RunFailed):
    pass


class Engine:
    def __init__(self, config: Config, paths: RunPaths, seeds: list[SeedEnvironment], *, view: LiveView):
        self.config = config
        self.paths = paths
        self.seeds = seeds
        self.view = view
        self.store = Store.open(paths.store)
        self.sampler = PassageSampler(load_corpus(config.curriculum.corpus or None), seed=config.run.seed)
        self.designs = Designs(config, self.store, self.sampler, random.Random(config.run.seed))
        self.designer_queue = DesignerQueue()
        self.metrics = MetricsLog(paths.metrics)
        self.evaluation = InLoopEval(config, paths, seeds, say=view.line)
        self.k = config.curriculum.refresh_interval
        self.policy_version = 0  # the learner's newest published version
        self.policy_path = ""
        self.target_version = 0  # the version the learner reaches once every batch sent is trained
        self.version_offset = 0  # versions tied to no step (see the module docstring)
        self._policy_changed = trio.Event()
        self._learner_ident: bytes | None = None
        self._learner_ready = trio.Event()
        self._worker_ready = trio.Event()
        self.stopping = False
        self.children: list[Child] = []
        self.step_stats: dict[int, dict] = {}
        self.learner_metrics: dict[int, dict] = {}
        self.isolation = ""
        self.worker_sock: MessageSocket | None = None
        self.learner_sock: MessageSocket | None = None
        self.dispatcher: Dispatcher | None = None
        self.bus = Bus(config, paths, view)  # sockets, keys, counters, rate-limited warnings (engine/peers/bus.py)
        self.result_gate = ResultGate.for_run(config, paths, view.line)  # checks every worker result (vocab_size read once)
        self.policy_server: PolicyServer | None = None
        self._progress = {"label": "", "done": 0, "total": 0}
        # The wall-clock budget (run.minutes, `up --minutes N`), counted from the first step (start-up is not): once
        # it is spent no step starts; those started finish and train, and `self.steps` (run.steps until then)
        # becomes the number of steps run.
        self.steps = config.run.steps
        self.deadline = math.inf
        self.admitted = 0  # steps whose plays have started

    # ------------------------------------------------------------------ sockets
    async def _receive_workers(self) -> None:
        assert self.worker_sock and self.dispatcher
        while True:
            try:
                ident, message = await self.worker_sock.receive_from()
            except ProtocolError as exc:
                self.bus.warnings.warn("malformed worker message", f"ignored a malformed message from {short_id(exc.ident)} on the worker socket: {exc}")
                continue
            if self.dispatcher.banned(ident):  # it sent results for tasks not leased to it (engine/peers/leases.py)
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
                    self.view.line(f"worker {short_id(message.worker_id)} joined (backend {short_id(message.backend)}, sandbox {short_id(message.isolation)}, {message.slots} slots)")
                    # Always answered: it tells the worker an engine is there, and which policy is current.
                    self.worker_sock.try_send_to(ident, PolicyUpdate(version=self.policy_version, path=self.policy_path))
                    self._worker_ready.set()
                case Heartbeat():
                    if self.dispatcher.seen(ident, message.policy_version) is None:  # e.g. attached before a restart
                        self.worker_sock.try_send_to(ident, HelloAgain())  # dropped if it is gone or not reading
                case DesignResult() | PlayResult() | ValidateResult() | TaskFailed():
                    self._complete(ident, message)
                case WorkerBye():
                    self.dispatcher.drop_worker(ident)
                case FetchRunInfo() | FetchManifest() | FetchChunk():  # a worker without the run's files
                    self.policy_server.submit(ident, message)

    def _complete(self, ident: bytes, message: DesignResult | PlayResult | ValidateResult | TaskFailed) -> None:
        warn = self.bus.warnings.warn
        if not isinstance(message, TaskFailed) and self.dispatcher.holds_lease(ident, message.task_id):
            # The values, and that it answers its task (engine/peers/result_checks.py); a rejected one is a failed task.
            message, drop = self.result_gate.screen(ident, message, self.dispatcher, self.policy_version)
            if drop:  # after the dispatcher took the failure, so the task is requeued once
                self.dispatcher.complete(ident, message)
                self.dispatcher.drop_worker(ident)
                return
        verdict = self.dispatcher.complete(ident, message)
        if verdict in ("rejected", "ban"):
            banned = "; it is dropped and banned for the rest of the run" if verdict == "ban" else ""
            warn("rejected result", f"rejected a result for task {short_id(message.task_id)} from {short_id(ident)}: the task is not leased to it{banned}")

    def _run_info(self) -> RunInfo:
        return RunInfo(config=self.paths.config.read_text(), model_path=self.paths.read_model_path(), policy_version=self.policy_version, policy_path=self.policy_path)

    async def _receive_learner(self) -> None:
        assert self.learner_sock
        while True:
            try:
                ident, message = await self.learner_sock.receive_from()
            except ProtocolError as exc:
                self.bus.warnings.warn("malformed learner message", f"ignored a malformed message from {short_id(exc.ident)} on the learner socket: {exc}")
                continue
            if not self.bus.learner_gate.admit(ident, message):  # only the learner this engine started (its token)
                self.bus.warnings.warn("rejected learner message", f"rejected a {type(message).__name__} from {short_id(ident)} on the learner socket: not this engine's learner")
                continue
            match message:
                case LearnerHello():
                    self._learner_ident = ident
                    self.policy_version = message.policy_version  # > 0 when it resumed from a checkpoint
                    self.policy_path = message.policy_path
                    self.policy_server.known(message.policy_version, message.policy_path)
                    if message.policy_version > 0:
                        await self.dispatcher.broadcast(PolicyUpdate(version=message.policy_version, path=message.policy_path))
                    self._learner_ready.set()
                case PolicyPublished():
                    self.policy_version = message.version
                    self.policy_path = message.path
                    self.policy_server.known(message.version, message.path)
                    self.learner_metrics[message.step] = message.metrics
                    await self.dispatcher.broadcast(PolicyUpdate(version=message.version, path=message.path))
                    with self.store.batch() as batch:
                        state = self.store.state()
                        state.policy_version = message.version
                        batch.put_state(state)
                    self._log_update(message.step)
                    self.evaluation.published(message.version)  # in-loop evaluation, when due (engine/evaluation.py)
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

    def training_version(self, step: int) -> int:
        """The policy version that trains step's batch."""
        return step + self.version_offset

    async def wait_for_version(self, version: int, label: str) -> None:
        while self.policy_version < version:
            self.view.status(f"{label}: waiting for policy v{version} (learner at v{self.policy_version})")
            await self._policy_changed.wait()

    def _log_update(self, step: int) -> None:
        row = self.metrics.write(step, self.step_stats.get(step), self.learner_metrics.get(step, {}), self.policy_version)
        log_to_trackers(self.config, self.paths, row)  # TensorBoard / W&B when run.tensorboard / run.wandb are on
        if "envs_requested" in row:
            self.view.step_line(row)
        else:
            self.view.line(f"flush update (designer samples of step {step}): v{self.policy_version} loss {row['learner_loss']:+.4f}")

    # ------------------------------------------------------------------ tasks
    def _on_result(self, result) -> None:
        self._progress["done"] += 1
        p = self._progress
        self.view.status(f"{p['label']} {p['done']}/{p['total']}")

    async def run_tasks(self, label: str, tasks: list) -> list:
        self._progress = {"label": label, "done": 0, "total": len(tasks)}
        self.view.status(f"{label} 0/{len(tasks)}")
        started = time.monotonic()
        results = await self.dispatcher.run_tasks(tasks)
        if not self.view.live:
            failed = sum(1 for r in results if isinstance(r, TaskFailed))
            self.view.line(f"{label}: {len(results)} done in {time.monotonic() - started:.0f} s" + (f" ({failed} failed)" if failed else ""))
        return results

    # ------------------------------------------------------------------ learner
    async def send_batch(self, step: int, samples: list[Sample], checkpoint: bool, active: list[ActiveEnv] | None = None) -> None:
        """Record the batch (and the run state after this step) in one transaction, then send it."""
        with self.store.batch() as batch:
            batch.put_batch(batch_record(self.target_version, step, samples, checkpoint))
            state = self.store.state()
            state.batches = self.target_version + 1
            state.policy_version = self.policy_version
            state.isolation = self.isolation
            if active is not None:
                state.steps_done = step + 1
                state.active_env_ids = [e.env_id for e in active]
                state.refresh_step = step - step % self.k
            batch.put_state(state)
        await self.learner_sock.send_to(self._learner_ident, TrainBatch(step=step, samples=samples, checkpoint=checkpoint))
        self.target_version += 1

    async def catch_up_learner(self) -> None:
        """Resend, from LMDB, every recorded batch the (restarted) learner has not trained yet."""
        records = list(self.store.batches())
        self.target_version = len(records)
        missing = [r for r in records if r.version >= self.policy_version]
        if missing:
            self.view.line(f"resume: the learner is at v{self.policy_version}; resending {len(missing)} recorded batches from the store")
        for record in missing:
            try:
                samples = stored_batch_samples(self.store, record)
            except MissingTrajectory as exc:
                raise EngineError(str(exc)) from None
            await self.learner_sock.send_to(self._learner_ident, TrainBatch(step=record.step, samples=samples, checkpoint=record.checkpoint))
        await self.wait_for_version(self.target_version, "resume: learner catching up")

    def restore(self, state: RunState) -> list[ActiveEnv]:
        """The active environments and the delayed designer samples of an interrupted run."""
        active = []
        for env_id in state.active_env_ids:
            env = self.store.environment(env_id)
            if env is None:
                raise EngineError(f"the run state names environment {env_id}, which is not in the store")
            active.append(ActiveEnv.of(env, designed_now=env.source == "designed" and env.step_created == state.refresh_step))
        self.designer_queue.restore(self.store, state, self.config.reward.train_designer)
        self.sampler.reseed(self.config.run.seed + 7919 * state.steps_done)
        return active

    # ------------------------------------------------------------------ the loop
    def time_up(self, step: int) -> bool:
        """Whether `step` must not start: the wall-clock budget is spent (the run then ends after the steps already
        started, so `self.steps` shrinks to them)."""
        if step < self.steps and time.monotonic() >= self.deadline:
            self.steps = self.admitted
            self.view.line(f"time budget of {self.config.run.minutes:g} min spent: finishing the {self.steps} steps started, then the report")
            self.deadline = math.inf  # said once; self.steps is final
        return step >= self.steps

    async def curriculum(self) -> None:
        self.designs.seed_memory(self.seeds)
        state = self.store.state()
        first = state.steps_done
        self.paths.update_meta(curriculum_started=time.time())
        active = self.restore(state) if first else []
        if first:
            self.view.line(f"resume: {first} steps done; continuing at step {first + 1} of {self.steps}")
        await self.catch_up_learner()
        self.version_offset = self.target_version - first
        step = self.admitted = first
        if self.config.run.minutes:
            self.deadline = time.monotonic() + self.config.run.minutes * 60
            self.view.budget_started()
        while not self.time_up(step):
            epoch_end = min(self.steps, (step // self.k + 1) * self.k)
            refresh = RefreshResult(active=active, requested=0, valid=0, tokens=0)
            epoch_started = time.monotonic()
            if step % self.k == 0:
                await self.wait_for_version(self.training_version(step) - self.config.run.max_staleness, f"step {step + 1}")
                refresh = await self.designs.refresh(step, self.run_tasks)
                active = refresh.active
            if not active:
                reuse = "there are no seed environments" if self.config.curriculum.reuse_valid_envs else "curriculum.reuse_valid_envs = false leaves failed slots empty"
                raise EngineError(f"no valid environment to play at step {step + 1}: every design failed and {reuse}")
            await self.run_epoch(range(step, epoch_end), refresh, epoch_started)
            step = min(epoch_end, self.steps)
        flush = self.designer_queue.pop(self.steps)
        if flush:  # designer samples whose reward fell due after the last step (the reference flushes them too)
            await self.send_batch(self.steps, flush, checkpoint=True)
        await self.wait_for_version(self.target_version, "final update")
        await self.evaluation.finish(self.policy_version)
        with self.store.batch() as batch:
            state = self.store.state()
            state.finished = True
            state.policy_version = self.policy_version
            batch.put_state(state)

    async def run_epoch(self, steps: range, refresh: RefreshResult, epoch_started: float) -> None:
        """The steps between two refreshes. A step's plays start as soon as admission allows (the learner at most
        `run.max_staleness` versions behind it), so with a bound above 0 later steps play while earlier ones
        finish and train; each step's batch is built and sent in step order once its plays are in."""
        bound = self.config.run.max_staleness
        done = {step: trio.Event() for step in steps}
        results: dict[int, list] = {}
        started: dict[int, float] = {}

        async def play(step: int) -> None:
            results[step] = await self.run_tasks(f"step {step + 1}: plays", play_tasks(self.config, step, refresh.active))
            done[step].set()

        async def admit(nursery) -> None:
            for step in steps:  # the budget is checked for all but the first (it started with its refresh)
                if step > steps.start and self.time_up(step):
                    break
                await self.wait_for_version(self.training_version(step) - bound, f"step {step + 1}")
                if step > steps.start and self.time_up(step):
                    break
                started[step] = epoch_started if step == steps.start else time.monotonic()  # a refresh counts
                self.admitted = step + 1
                nursery.start_soon(play, step)
            for step in steps:  # the steps the budget left unstarted: nobody waits for them
                if step >= self.steps:
                    done[step].set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(admit, nursery)
            for step in steps:
                if step < self.steps:
                    await done[step].wait()
                if step >= self.steps:  # the budget was spent before this step started (every started one is done)
                    nursery.cancel_scope.cancel()
                    break
                designs = refresh if step == steps.start else RefreshResult(active=refresh.active, requested=0, valid=0, tokens=0)
                await self.finish_step(step, results.pop(step), designs, time.monotonic() - started[step])

    async def finish_step(self, step: int, results: list, refresh: RefreshResult, seconds: float) -> None:
        plays = store_plays(self.store, step, results)
        retired = self.designs.retire(step, plays, refresh.active)  # hung environments play no more (in place)
        for env_id in sorted(retired):
            self.view.line(f"step {step + 1}: environment {env_id} retired: a call hung past sandbox.step_timeout_s")
        samples, zero_groups = agent_samples(plays, train_hint=self.config.play.train_hint_plays)
        groups = len({(s.env_id, s.arm) for s in samples})
        samples, too_stale = drop_stale(samples, self.target_version, self.config.run.max_staleness)
        self.designer_queue.add(close_window(self.store, self.config.reward, self.k, step, len(samples)))
        if step % self.k == 0:
            update_memory(self.store, self.config.curriculum, step, refresh.active, plays)
        due = self.designer_queue.pop(step)
        outcome = StepOutcome(
            step=step, plays=plays, results=results, agent_samples=len(samples), designer_samples=len(due),
            zero_variance_groups=zero_groups, dropped_stale=too_stale, envs_requested=refresh.requested,
            envs_valid=refresh.valid, tokens=refresh.tokens + sum(r.tokens_generated for r in plays), seconds=seconds,
            agent_groups=groups, edits_requested=refresh.edits_requested, edits_valid=refresh.edits_valid,
            duplicates=refresh.duplicates, edit_replies=refresh.edit_replies,
        )
        stats = step_metrics(outcome, k=self.k, env_slots=self.config.curriculum.envs_per_step, isolation=self.isolation)
        trained_at = self.target_version
        # In a thread (LMDB readers may): the embedding pass takes seconds, and the hub must go on serving peers.
        stats |= await trio.to_thread.run_sync(
            lambda: curriculum_metrics(self.store, self.paths, step, refresh, plays, trained_at=trained_at, seconds=seconds)
        )
        self.step_stats[step] = stats
        first = step - step % self.config.run.learnable_window
        window = {s: self.step_stats[s] for s in range(first, step + 1) if s in self.step_stats}
        if len(window) <= step - first:  # earlier steps of the window ran before a resume: their rows are on disk
            window = {**self.metrics.step_rows(), **window}
        stats["learnable_share_window"] = window_share(window, first, step)
        self.time_up(self.admitted)  # a budget spent now ends the run after the steps already started
        last = step == self.steps - 1
        checkpoint = last and not self.designer_queue.waiting(self.steps)
        await self.send_batch(step, samples + due, checkpoint=checkpoint, active=refresh.active)

    async def run(self) -> None:
        async with self.bus.open() as (worker_sock, learner_sock), trio.open_nursery() as nursery:
            self.worker_sock, self.learner_sock = worker_sock, learner_sock
            self.dispatcher = Dispatcher(worker_sock, on_result=self._on_result)
            self.policy_server = PolicyServer(self.paths, worker_sock, self._run_info)
            self.bus.extra["workers"] += [lambda: self.dispatcher.leases.counters, lambda: self.policy_server.counters]
            await nursery.start(self.dispatcher.run)
            nursery.start_soon(self.bus.run)
            nursery.start_soon(self.policy_server.run)
            nursery.start_soon(self._receive_workers)
            nursery.start_soon(self._receive_learner)
            nursery.start_soon(self.evaluation.serve, self.dispatcher)
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
        learner = learner_child(self.paths, self.config.learner.world_size, token=self.bus.token)
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
