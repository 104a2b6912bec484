"""Time-shared GPUs, the engine's side (engine/peers/time_share.py through engine/peers/hub.py Hub.train): the batch
goes to the learner only once every planned worker has said `Slept`; a worker that was not asked is not counted;
one that leaves is not waited for; `WakeUp` goes out once; a worker that joins while the others sleep sleeps too.
The sockets are fakes that log what the hub sends, in order (they stand in for ZeroMQ)."""

import json

import trio
import trio.testing

from engine.peers.hub import Hub
from engine.peers.time_share import TimeShare
from engine.protocol.config_loading import load_config
from engine.protocol.messages import Sleep, TrainBatch, WakeUp
from engine.protocol.paths import RunPaths
from engine.protocol.placement import plan_placement, plan_record
from tests.engine.peers.peers_helpers import RecordingView


class State:
    def __init__(self, worker_id):
        self.worker_id = worker_id


class FakeDispatcher:
    def __init__(self, workers):
        self.workers = workers


class WorkerSocket:
    def __init__(self, log):
        self.log = log

    def try_send_to(self, ident, message):
        self.log.append((ident, message))
        return True


class LearnerSocket:
    def __init__(self, log):
        self.log = log

    async def send_to(self, ident, message):
        self.log.append((ident, message))


def _plan(gpus=2, staleness=0):
    config = load_config(overrides=['inference.backend="vllm"', f"run.max_staleness={staleness}"])
    return config, plan_placement(config, None, gpus=gpus, gpu_memory_gib=80)


def _hub(tmp_path, plan, config, log):
    paths = RunPaths(tmp_path / "run")
    paths.root.mkdir(parents=True)
    paths.update_meta(placement=json.loads(json.dumps(plan_record(plan))))  # as `up` writes it
    hub = Hub(config, paths, RecordingView(), on_published=lambda message: None)
    hub.dispatcher = FakeDispatcher({b"a": State("w0"), b"b": State("w1"), b"x": State("hand-attached")})
    hub.worker_sock, hub.learner_sock, hub._learner_ident = WorkerSocket(log), LearnerSocket(log), b"L"
    return hub


async def _start_update(nursery, hub):
    """hub.train for step 0 in the background, returned once it waits (for the workers' Slept)."""
    nursery.start_soon(hub.train, 0, [], False)
    await trio.testing.wait_all_tasks_blocked()


def _kinds(log):
    return [(ident, type(message).__name__) for ident, message in log]


def test_the_batch_goes_out_only_after_every_planned_worker_slept(tmp_path):
    config, plan = _plan()
    assert plan.time_shared
    log = []
    hub = _hub(tmp_path, plan, config, log)

    async def main():
        async with trio.open_nursery() as nursery:
            await _start_update(nursery, hub)
            assert _kinds(log) == [(b"a", "Sleep"), (b"b", "Sleep")]  # not the worker `up` did not start
            assert not hub.time_share.slept(b"x", "hand-attached")  # not asked: not counted
            assert hub.time_share.slept(b"a", "w0")
            await trio.testing.wait_all_tasks_blocked()
            assert not any(isinstance(m, TrainBatch) for _, m in log)
            hub.time_share.slept(b"b", "w1")
        assert isinstance(log[-1][1], TrainBatch) and log[-1][0] == b"L"
        # a second batch while they sleep (a resume's resends): no second round
        await hub.train(1, [], False)
        assert [type(m).__name__ for _, m in log].count("Sleep") == 2
        await hub.time_share.wake(2)
        await hub.time_share.wake(2)
        assert [(i, m.version) for i, m in log if isinstance(m, WakeUp)] == [(b"a", 2), (b"b", 2)]

    trio.run(main)
    assert hub.time_share.events == [("sleep", 1), ("slept", "w0"), ("slept", "w1"), ("wake", 2)]
    assert hub.time_share.counters["unanswered"] == 0


def test_a_worker_that_leaves_is_not_waited_for_and_one_that_joins_sleeps(tmp_path):
    config, plan = _plan()
    log = []
    hub = _hub(tmp_path, plan, config, log)

    async def main():
        async with trio.open_nursery() as nursery:
            await _start_update(nursery, hub)
            hub.time_share.slept(b"a", "w0")
            del hub.dispatcher.workers[b"b"]  # w1 died: its GPU memory went with it
        assert isinstance(log[-1][1], TrainBatch)
        hub.time_share.joined(b"c", "w1")  # restarted while the learner updates
        assert isinstance(log[-1][1], Sleep) and log[-1][0] == b"c"

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_an_unanswered_sleep_is_named_and_the_update_goes_on(tmp_path):
    config, plan = _plan()
    log = []
    hub = _hub(tmp_path, plan, config, log)
    trio.run(hub.train, 0, [], False, clock=trio.testing.MockClock(autojump_threshold=0))
    assert isinstance(log[-1][1], TrainBatch)
    assert hub.time_share.counters["unanswered"] == 2
    assert any("w0, w1 did not put their engine to sleep" in line for line in hub.view.lines)


def test_split_and_cpu_layouts_never_sleep(tmp_path):
    for gpus, staleness in ((2, 2), (0, 0)):
        config, plan = _plan(gpus, staleness)
        share = TimeShare(plan, send=lambda ident, message: True, connected=dict, timeout_s=1, say=print)
        assert not share.enabled

        async def main():
            await share.sleep(1)
            await share.all_joined()

        trio.run(main)
        assert share.events == []
