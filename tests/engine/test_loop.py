"""The curriculum loop (engine/run.py) alone: fake stages and a fake hub, no processes and no sockets. Each step
calls its stages once, in order; the refresh comes every k steps; the designer samples due after the last step are
flushed; a spent wall-clock budget ends the run after the steps already started."""

import json

import pytest
import trio

import engine.run as loop
from engine.batches import StepBatch
from engine.curriculum import ActiveEnv
from engine.metrics.live import LiveView
from engine.plays import StepPlays
from engine.protocol.config_loading import load_config
from engine.protocol.errors import RunFailed
from engine.protocol.metrics_file import read_rows
from engine.protocol.paths import RunPaths
from engine.curriculum import RefreshResult
from engine.run import Engine
from tests.engine.builders import make_sample

ENV = ActiveEnv(env_id="e", skill="A", code="class AEnv: ...", hint="h", designed_now=True, class_name="AEnv")


class FakeHub:
    """A learner that trains each batch at once and workers nobody asks for: the versions move with the batches."""

    def __init__(self, calls):
        self.calls = calls
        self.sample_norms = []  # of each batch sent
        self.policy_version = self.target_version = 0
        self.isolation = "none"
        self.changed = trio.Event()

    async def run_tasks(self, label, tasks):
        raise AssertionError("the fake stages send no task")

    async def train(self, step, samples, checkpoint, sample_norm=0):
        self.calls.append(("send", step, [s.sample_id for s in samples], checkpoint))
        self.sample_norms.append(sample_norm)
        self.target_version += 1
        self.policy_version = self.target_version
        self.changed.set()
        self.changed = trio.Event()

    async def wait_for_version(self, version, label):
        while self.policy_version < version:
            await self.changed.wait()


class FakeDesigns:
    def __init__(self, calls, active):
        self.calls, self.active = calls, active
        self.versions = {}  # step -> the policy version its design tasks may start on

    def seed_memory(self, seeds):
        pass

    async def refresh(self, step, run_tasks, version=0):
        self.calls.append(("refresh", step))
        self.versions[step] = version
        return RefreshResult(active=list(self.active), requested=1, valid=len(self.active), tokens=0)


class FakePlays:
    def __init__(self, calls):
        self.calls = calls
        self.versions = {}  # step -> the policy version its play tasks may start on

    async def play(self, step, active, run_tasks, turn, version=0):
        self.calls.append(("plays", step))
        self.versions[step] = version
        await turn.wait()
        return StepPlays(results=[], plays=[])


def _engine(tmp_path, monkeypatch, *overrides, active=(ENV,), designer_due=None, agents=1, cut=False):
    """The loop with every stage faked; `designer_due(step)` is the step a designer sample made at `step` falls due;
    each step trains `agents` agent samples; with `cut`, a window the end cuts short has a design ("cut{step}")."""
    config = load_config(overrides=["curriculum.refresh_interval=2", "run.max_staleness=0", *overrides])
    calls = []
    engine = Engine(config, RunPaths(tmp_path / "run"), [], view=LiveView(config.run.steps, enabled=False), hub=FakeHub(calls))
    engine.designs, engine.plays = FakeDesigns(calls, active), FakePlays(calls)

    def step_batch(plays, due, **_):
        calls.append(("batches", [s.sample_id for s in due]))
        agent = [make_sample("a" if i == 0 else f"a{i}", "agent", "e", "A", "no_hint", 0) for i in range(agents)]
        return StepBatch(agent=agent, designer=due, zero_variance_groups=0, agent_groups=1, dropped_stale=0)

    def designer_step(store, config, queue, step, agent_samples, active, plays):
        calls.append(("designer", step))
        if designer_due and designer_due(step) is not None:
            queue.due[designer_due(step)].append(make_sample(f"d{step}", "designer", "e", "A", "design", step))

    def close_cut_window(store, config, queue, last_step, agent_samples):
        k = config.curriculum.refresh_interval
        if not cut or last_step % k == k - 1:  # no design, or the window is whole
            return 0
        calls.append(("cut", last_step, agent_samples))
        queue.due[last_step + 1].append(make_sample(f"cut{last_step - last_step % k}", "designer", "e", "A", "design", last_step))
        return 1

    async def metrics_row(step, played, batch, refresh, seconds):
        calls.append(("metrics", step))
        return {}

    monkeypatch.setattr(loop, "step_batch", step_batch)
    monkeypatch.setattr(loop, "designer_step", designer_step)
    monkeypatch.setattr(loop, "close_cut_window", close_cut_window)
    engine.metrics_row = metrics_row
    return engine, calls


def _step(step, refresh=False, due=(), sent=None, checkpoint=False):
    return [*([("refresh", step)] if refresh else []), ("plays", step), ("batches", list(due)), ("designer", step),
            ("metrics", step), ("send", step, ["a", *due] if sent is None else sent, checkpoint)]


def test_each_step_calls_its_stages_once_in_order_and_the_refresh_every_k(tmp_path, monkeypatch):
    engine, calls = _engine(tmp_path, monkeypatch, "run.steps=5")
    trio.run(engine.curriculum)
    assert calls == [*_step(0, refresh=True), *_step(1), *_step(2, refresh=True), *_step(3), *_step(4, refresh=True, checkpoint=True)]
    state = engine.store.state()
    assert (state.steps_done, state.batches, state.finished, state.refresh_step, state.active_env_ids) == (5, 5, True, 4, ["e"])
    engine.store.close()


def test_the_designer_samples_due_after_the_last_step_are_flushed_in_one_more_batch(tmp_path, monkeypatch):
    """A window that closes at step s makes samples due at s + 1: they join that step's batch, and those due after
    the last step go in a final batch that carries the checkpoint."""
    engine, calls = _engine(tmp_path, monkeypatch, "run.steps=4", designer_due=lambda step: step + 1 if step % 2 else None)
    trio.run(engine.curriculum)
    assert calls == [*_step(0, refresh=True), *_step(1), *_step(2, refresh=True, due=["d1"]), *_step(3), ("send", 4, ["d3"], True)]
    assert [r.step for r in engine.store.batches()] == [0, 1, 2, 3, 4] and engine.store.state().finished
    engine.store.close()


def test_a_window_cut_by_the_end_is_rewarded_and_flushed_with_a_normal_steps_sample_count(tmp_path, monkeypatch):
    """run.steps = 5 at k = 2: the refresh at step 4 has one step of its window; its designs are rewarded over it
    (close_cut_window, before step 4's checkpoint flag) and flushed, the flush weighing each sample as a step's
    batch of 3 agent samples + the flushed ones would (sample_norm)."""
    engine, calls = _engine(tmp_path, monkeypatch, "run.steps=5", designer_due=lambda step: step + 1 if step % 2 else None, agents=3, cut=True)
    trio.run(engine.curriculum)
    sent = lambda due=(): ["a", "a1", "a2", *due]  # noqa: E731
    assert calls == [*_step(0, refresh=True, sent=sent()), *_step(1, sent=sent()), *_step(2, refresh=True, due=["d1"], sent=sent(["d1"])),
                     *_step(3, sent=sent()), *_step(4, refresh=True, due=["d3"], sent=sent(["d3"]))[:-1], ("cut", 4, 3),
                     ("send", 4, sent(["d3"]), False), ("send", 5, ["cut4"], True)]
    assert engine.hub.sample_norms == [0, 0, 0, 0, 0, 3 + 1]
    assert engine.step_stats[5] == {"step": 5, "flush_designer_samples": 1, "flush_sample_norm": 4, "cut_window_designs": 1}
    assert engine.store.state().finished
    assert [r.sample_norm for r in engine.store.batches()] == [0, 0, 0, 0, 0, 4]  # stored with its batch ...
    engine.store.close()


def test_a_resent_flush_keeps_its_sample_norm(tmp_path, monkeypatch):
    """... so a learner that restarts behind the flush trains it again with the same per-sample weight; the step
    figures stored with each batch come back for the metrics rows of the resent versions."""
    engine, calls = _engine(tmp_path, monkeypatch, "run.steps=5", designer_due=lambda step: step + 1 if step % 2 else None, agents=3, cut=True)
    trio.run(engine.curriculum)
    monkeypatch.setattr(loop, "stored_batch_samples", lambda store, record: [make_sample(f"r{record.version}", "agent", "e", "A", "no_hint", record.step)])
    engine.hub.policy_version = engine.hub.target_version = 4  # the learner's checkpoint is behind the last two batches
    engine.hub.sample_norms.clear()
    every = dict(engine.step_stats)
    played = {s: engine.step_stats[s] for s in (4, 5)}
    engine.step_stats.clear()  # a restarted engine: the step figures are only in the store
    trio.run(engine.catch_up_learner)
    assert engine.hub.sample_norms == [0, 4]
    assert engine.step_stats == played  # restored from the batches, so the rows written on landing are whole
    # a version the learner's checkpoint holds but whose row the killed engine never wrote is written from the store
    rows = [r for r in read_rows(engine.paths.metrics) if r.get("policy_version") != 3]
    engine.paths.metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    engine.metrics = loop.MetricsLog(engine.paths.metrics)
    trio.run(engine.catch_up_learner)
    (row,) = [r for r in read_rows(engine.paths.metrics) if r.get("policy_version") == 3]
    assert row["step"] == 2 and every[2] and all(row[k] == v for k, v in every[2].items())
    engine.store.close()


def test_a_spent_budget_ends_the_run_after_the_steps_already_started(tmp_path, monkeypatch):
    engine, calls = _engine(tmp_path, monkeypatch, "run.steps=6")
    metrics_row = engine.metrics_row

    async def spend_the_budget_at_step_1(step, *args):
        if step == 1:
            engine.deadline = 0.0  # the clock is past it from now on
        return await metrics_row(step, *args)

    engine.metrics_row = spend_the_budget_at_step_1
    trio.run(engine.curriculum)
    assert calls == [*_step(0, refresh=True), *_step(1, checkpoint=True)]  # step 2 never starts; step 1 is the last
    assert engine.steps == 2 and engine.store.state().finished
    engine.store.close()


@pytest.mark.parametrize("bound", [0, 1])
def test_the_tasks_of_a_step_carry_the_version_its_admission_waited_for(tmp_path, monkeypatch, bound):
    """Step s is admitted once the learner publishes training_version(s) - run.max_staleness; its tasks carry that
    version, which the worker loads before it starts them (actors/worker.py)."""
    engine, _ = _engine(tmp_path, monkeypatch, "run.steps=5", f"run.max_staleness={bound}")
    trio.run(engine.curriculum)
    assert engine.plays.versions == {s: max(0, s - bound) for s in range(5)}
    assert engine.designs.versions == {s: max(0, s - bound) for s in (0, 2, 4)}
    engine.store.close()


def test_a_refresh_without_any_environment_fails_the_run(tmp_path, monkeypatch):
    engine, _ = _engine(tmp_path, monkeypatch, "run.steps=2", active=())
    with pytest.raises(RunFailed, match="no valid environment to play at step 1"):
        trio.run(engine.curriculum)
    engine.store.close()


def test_the_loop_never_touches_a_socket():
    with open(loop.__file__) as f:
        source = f.read()
    assert "sock" not in source and "zmq" not in source and "transport" not in source


def test_a_budget_that_cuts_a_window_short_rewards_and_flushes_its_designs(tmp_path, monkeypatch):
    engine, calls = _engine(tmp_path, monkeypatch, "run.steps=8", cut=True)
    metrics_row = engine.metrics_row

    async def spend_the_budget_at_step_2(step, *args):
        if step == 2:
            engine.deadline = 0.0
        return await metrics_row(step, *args)

    engine.metrics_row = spend_the_budget_at_step_2
    trio.run(engine.curriculum)
    assert engine.steps == 3
    assert calls[-3:] == [("cut", 2, 1), ("send", 2, ["a"], False), ("send", 3, ["cut2"], True)]
    assert engine.hub.sample_norms[-1] == 2
    engine.store.close()
