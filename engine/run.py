"""The curriculum loop of the engine process, the only LMDB writer; its peers are the hub's (engine/peers/hub.py).

Each step s (0-based) calls each stage once, in this order:
1. refresh (engine/refresh.py), if s % k == 0: new environments designed by the workers, stored with their
   verdicts; a slot left empty plays an earlier valid environment of its skill.
2. plays (engine/plays.py): once the learner is at most `run.max_staleness` versions behind the version that trains
   step s's batch (admission control), play every active environment G times without its hint and H times with it;
   store them; retire environments that hung. Tasks carry the admitted version, which a worker loads first.
3. batches (engine/batches.py): agent advantages, stale samples dropped, the designer samples due at s.
4. designer reward (engine/designer_reward.py): close the k-step window of the environments made at s + 1 - k;
   after a refresh step, update the environment memory.
5. the metrics row (engine/metrics/steps.py), its time by phase (metrics/phases.py) too, written as the update lands.
6. send the batch: recorded with the run state in one transaction, then sent to the learner.
Designer samples whose reward falls due after the final step are flushed at the end, as the reference does; a last
refresh window the run's end cut short is rewarded over the steps played (`close_cut_window`) and flushed too. The
flush carries `sample_norm` (the last step's agent samples + the flushed ones), so that under the per-sample mean
each flushed sample weighs what it would in a step's batch.

Policy versions: the learner publishes `policy_version`; batch i is trained by version i and makes i + 1, so
`hub.target_version` (the batches sent) is where the learner will be once it has trained them all, and step s's
batch is trained by version `training_version(s)` = s + `version_offset` (versions tied to no step: the final
designer flush of a finished run that is now extended).
"""

from __future__ import annotations

import math
import random
import time

import trio

from engine.batches import MissingTrajectory, StepBatch, batch_record, step_batch, stored_agent_samples, stored_batch_samples, stored_step_row
from engine.curriculum import ActiveEnv, PassageSampler, RefreshResult, SeedEnvironment, load_corpus
from engine.designer_reward import DesignerQueue, close_cut_window, designer_step
from engine.evaluation import InLoopEval
from engine.metrics.curriculum_signals import curriculum_metrics
from engine.metrics.live import LiveView
from engine.metrics.phases import StepClock
from engine.metrics.steps import MetricsLog, StepOutcome, step_metrics, window_share
from engine.metrics.trackers import log_to_trackers
from engine.peers.hub import Hub
from engine.plays import Plays, StepPlays
from engine.protocol.config import Config
from engine.protocol.errors import RunFailed
from engine.protocol.messages import PolicyPublished, Sample
from engine.protocol.paths import RunPaths
from engine.refresh import Designs
from storage.records import RunState
from storage.store import Store


class Engine:
    def __init__(self, config: Config, paths: RunPaths, seeds: list[SeedEnvironment], *, view: LiveView, hub: Hub | None = None):
        self.config = config
        self.paths = paths
        self.seeds = seeds
        self.view = view
        self.store = Store.open(paths.store)
        self.sampler = PassageSampler(load_corpus(config.curriculum.corpus or None), seed=config.run.seed)
        self.designs = Designs(config, self.store, self.sampler, random.Random(config.run.seed))
        self.plays = Plays(config, self.store, self.designs.retired, view.line)
        self.designer_queue = DesignerQueue()
        self.metrics = MetricsLog(paths.metrics)
        self.evaluation = InLoopEval(config, paths, seeds, say=view.line)
        self.hub = hub or Hub(config, paths, view, on_published=self.published)
        self.clock = StepClock()  # each step's time by phase (engine/metrics/phases.py)
        self.hub.on_heartbeat = self.clock.heartbeat
        self.k = config.curriculum.refresh_interval
        self.version_offset = 0  # versions tied to no step (see the module docstring)
        self.step_stats: dict[int, dict] = {}
        # The wall-clock budget (run.minutes, `up --minutes N`), counted from the first step (start-up is not): once
        # it is spent no step starts; those started finish and train, and `self.steps` (run.steps until then)
        # becomes the number of steps run.
        self.steps = config.run.steps
        self.deadline = math.inf
        self.admitted = 0  # steps whose plays have started
        self.agent_samples: dict[int, int] = {}  # agent samples of each step's batch (the flush's sample_norm)
        self.cut_closed = -1  # the last step whose cut window was closed (close_cut_window runs once)
        self.cut_designs = 0

    async def run(self) -> None:
        await self.hub.run(self.curriculum, services=[self.evaluation.serve])

    def stop_children(self) -> None:
        self.hub.stop_children()
        self.store.close()

    # ------------------------------------------------------------------ the learner's side
    def published(self, message: PolicyPublished) -> None:
        """A new policy version: record it, write the metrics row of its step, start its evaluation when due."""
        self.clock.learner_published(message.metrics.get("learner_update_s", 0.0), message.metrics.get("learner_publish_s", 0.0))
        with self.store.batch() as batch:
            state = self.store.state()
            state.policy_version = message.version
            batch.put_state(state)
        row = self.metrics.write(message.step, self.step_stats.get(message.step), message.metrics, message.version)
        log_to_trackers(self.config, self.paths, row)  # TensorBoard / W&B when run.tensorboard / run.wandb are on
        if "envs_requested" in row:
            self.view.step_line(row)
        else:
            self.view.line(f"flush update (designer samples of step {message.step}): v{message.version} loss {row['learner_loss']:+.4f}")
        self.evaluation.published(message.version)  # in-loop evaluation, when due (engine/evaluation.py)

    def training_version(self, step: int) -> int:
        """The policy version that trains step's batch."""
        return step + self.version_offset

    def admitted_version(self, step: int) -> int:
        """The policy version step's admission waits for; its tasks carry it (`min_policy_version`), so no worker
        starts them on an older one, which at `run.max_staleness = 0` would be dropped as stale."""
        return max(0, self.training_version(step) - self.config.run.max_staleness)

    def close_cut_window(self) -> None:
        """Reward the designs of a last refresh window the run's end cut short (engine/designer_reward.py), once."""
        last = self.steps - 1
        if last < 0 or self.cut_closed == last:
            return
        self.cut_closed = last
        designs = close_cut_window(self.store, self.config, self.designer_queue, last, self.agent_samples.get(last) or stored_agent_samples(self.store, last))
        if designs:
            self.cut_designs += designs
            played = last % self.k + 1
            self.view.line(f"the run ended {played} of {self.k} steps into the window of the refresh at step {last - played + 2}: "
                           f"its {designs} designs are rewarded over those steps" + (", and flushed" if self.config.reward.train_designer else ""))

    async def send_batch(self, step: int, samples: list[Sample], checkpoint: bool, active: list[ActiveEnv] | None = None,
                         sample_norm: int = 0) -> None:
        """Record the batch (and the run state after this step) in one transaction, then send it."""
        with self.store.batch() as batch:
            batch.put_batch(batch_record(self.hub.target_version, step, samples, checkpoint, sample_norm, self.step_stats.get(step)))
            state = self.store.state()
            state.batches = self.hub.target_version + 1
            state.policy_version = self.hub.policy_version
            state.isolation = self.hub.isolation
            if active is not None:
                state.steps_done = step + 1
                state.active_env_ids = [e.env_id for e in active]
                state.refresh_step = step - step % self.k
            batch.put_state(state)
        await self.hub.train(step, samples, checkpoint, sample_norm=sample_norm)

    async def catch_up_learner(self) -> None:
        """Resend, from LMDB, every recorded batch the (restarted) learner has not trained yet."""
        records = list(self.store.batches())
        missing = [r for r in records if r.version >= self.hub.policy_version]
        for record in records:  # trained (in the learner's checkpoint) but killed before its row was written
            if record.version < self.hub.policy_version and not self.metrics.has(record.version + 1):
                if (row := stored_step_row(record)) is not None:
                    self.metrics.write(record.step, row, {}, record.version + 1)
        self.hub.target_version = len(records) - len(missing)  # each resent batch counts again as it goes
        if missing:
            self.view.line(f"resume: the learner is at v{self.hub.policy_version}; resending {len(missing)} recorded batches from the store")
        for record in missing:
            try:
                samples = stored_batch_samples(self.store, record)
            except MissingTrajectory as exc:
                raise RunFailed(str(exc)) from None
            if record.step not in self.step_stats and (row := stored_step_row(record)) is not None:
                self.step_stats[record.step] = row  # its metrics row is written whole when the update lands
            await self.hub.train(record.step, samples, record.checkpoint, sample_norm=record.sample_norm)
        await self.hub.wait_for_version(self.hub.target_version, "resume: learner catching up")

    def restore(self, state: RunState) -> list[ActiveEnv]:
        """The active environments and the delayed designer samples of an interrupted run."""
        active = []
        for env_id in state.active_env_ids:
            env = self.store.environment(env_id)
            if env is None:
                raise RunFailed(f"the run state names environment {env_id}, which is not in the store")
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
        self.version_offset = self.hub.target_version - first
        step = self.admitted = first
        if self.config.run.minutes:
            self.deadline = time.monotonic() + self.config.run.minutes * 60
            self.view.budget_started()
        self.clock.begin()
        while not self.time_up(step):
            epoch_end = min(self.steps, (step // self.k + 1) * self.k)
            refresh = RefreshResult(active=active, requested=0, valid=0, tokens=0)
            epoch_started = time.monotonic()
            if step % self.k == 0:
                with self.clock.span(step, "admission"):
                    await self.hub.wait_for_version(self.admitted_version(step), f"step {step + 1}")
                with self.clock.span(step, "refresh"):
                    refresh = await self.designs.refresh(step, self.hub.run_tasks, self.admitted_version(step))
                active = refresh.active
            if not active:
                reuse = "there are no seed environments" if self.config.curriculum.reuse_valid_envs else "curriculum.reuse_valid_envs = false leaves failed slots empty"
                raise RunFailed(f"no valid environment to play at step {step + 1}: every design failed and {reuse}")
            await self.run_epoch(range(step, epoch_end), refresh, epoch_started)
            step = min(epoch_end, self.steps)
        self.close_cut_window()  # a no-op unless the budget ended the run after its last step's batch went out
        flush = self.designer_queue.pop(self.steps)
        if flush:  # designer samples whose reward fell due after the last step (the reference flushes them too)
            norm = (self.agent_samples.get(self.steps - 1) or stored_agent_samples(self.store, self.steps - 1)) + len(flush)
            self.step_stats[self.steps] = {"step": self.steps, "flush_designer_samples": len(flush), "flush_sample_norm": norm,
                                           "cut_window_designs": self.cut_designs}
            await self.send_batch(self.steps, flush, checkpoint=True, sample_norm=norm)
        await self.hub.wait_for_version(self.hub.target_version, "final update")
        await self.evaluation.finish(self.hub.policy_version)
        with self.store.batch() as batch:
            state = self.store.state()
            state.finished = True
            state.policy_version = self.hub.policy_version
            batch.put_state(state)

    async def run_epoch(self, steps: range, refresh: RefreshResult, epoch_started: float) -> None:
        """The steps between two refreshes. A step's plays start as soon as admission allows (the learner at most
        `run.max_staleness` versions behind it), so with a bound above 0 later steps play while earlier ones
        finish and train; each step's plays are stored, and its batch built and sent, in step order (`turn`)."""
        done = {step: trio.Event() for step in steps}
        turn = {step: trio.Event() for step in steps}  # set once the step before has sent its batch
        turn[steps.start].set()
        played: dict[int, StepPlays] = {}
        started: dict[int, float] = {}

        async def play(step: int) -> None:
            with self.clock.span(step, "plays"):
                played[step] = await self.plays.play(step, refresh.active, self.hub.run_tasks, turn[step], self.admitted_version(step))
            done[step].set()

        async def admit(nursery) -> None:
            for step in steps:  # the budget is checked for all but the first (it started with its refresh)
                if step > steps.start and self.time_up(step):
                    break
                with self.clock.span(step, "admission"):
                    await self.hub.wait_for_version(self.admitted_version(step), f"step {step + 1}")
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
                await self.finish_step(step, played.pop(step), designs, time.monotonic() - started[step])
                if step + 1 in turn:
                    turn[step + 1].set()

    async def finish_step(self, step: int, played: StepPlays, refresh: RefreshResult, seconds: float) -> None:
        """The stages of a step after its plays: its batch, the designer reward, the metrics row, the send."""
        c = self.config
        with self.clock.span(step, "engine"):
            batch = step_batch(played.plays, self.designer_queue.pop(step), train_hint=c.play.train_hint_plays,
                               trained_at=self.hub.target_version, bound=c.run.max_staleness)
            designer_step(self.store, c, self.designer_queue, step, len(batch.agent), refresh.active, played.plays)
            stats = await self.metrics_row(step, played, batch, refresh, seconds)
            self.agent_samples[step] = len(batch.agent)
            self.time_up(self.admitted)  # a budget spent now ends the run after the steps already started
            if step == self.steps - 1:  # before the checkpoint flag: a cut window's designs make a flush
                self.close_cut_window()
            checkpoint = step == self.steps - 1 and not self.designer_queue.waiting(self.steps)
        # the step's time by phase, up to its send (engine/metrics/phases.py); the row is written once the update lands
        self.step_stats[step] = stats | self.clock.close(step, refresh.phase_seconds, played.reload_s)
        await self.send_batch(step, batch.samples, checkpoint=checkpoint, active=refresh.active)

    async def metrics_row(self, step: int, played: StepPlays, batch: StepBatch, refresh: RefreshResult, seconds: float) -> dict:
        """The step's metrics (written once its update lands, in `published`)."""
        plays = played.plays
        stats = step_metrics(StepOutcome.of(step, played, batch, refresh, seconds), k=self.k, env_slots=self.config.curriculum.envs_per_step, isolation=self.hub.isolation)
        trained_at = self.hub.target_version
        # In a thread (LMDB readers may): the embedding pass takes seconds, and the hub must go on serving peers.
        stats |= await trio.to_thread.run_sync(
            lambda: curriculum_metrics(self.store, self.paths, step, refresh, plays, trained_at=trained_at, seconds=seconds)
        )
        first = step - step % self.config.run.learnable_window
        window = {s: self.step_stats[s] for s in range(first, step) if s in self.step_stats} | {step: stats}
        if len(window) <= step - first:  # earlier steps of the window ran before a resume: their rows are on disk
            window = {**self.metrics.step_rows(), **window}
        stats["learnable_share_window"] = window_share(window, first, step)
        return stats
