"""The hub's task progress (engine/peers/hub.py run_tasks): calls under one label that overlap, as a refresh's slots
do (engine/refresh.py), share one count; each finished task counts once, in its own label."""

import trio
import trio.testing

from engine.peers.hub import Hub
from engine.protocol.config_loading import load_config
from engine.protocol.messages import TaskFailed
from engine.protocol.paths import RunPaths
from tests.engine.peers.peers_helpers import RecordingView


class Task:
    def __init__(self, task_id):
        self.task_id = task_id


class FakeDispatcher:
    """Finishes each task after `seconds[task_id]` of trio's clock, reporting it to the hub as the dispatcher does."""

    def __init__(self, hub, seconds):
        self.hub, self.seconds = hub, seconds

    async def run_tasks(self, tasks):
        await trio.sleep(max(self.seconds[t.task_id] for t in tasks))
        results = [TaskFailed(task_id=t.task_id, worker_id="w", reason="scripted") for t in tasks]
        for result in results:
            self.hub._on_result(result)
        return results


def test_overlapping_calls_under_one_label_share_a_count(tmp_path):
    view = RecordingView()
    hub = Hub(load_config(), RunPaths(tmp_path / "run"), view, on_published=lambda message: None)
    hub.dispatcher = FakeDispatcher(hub, {"a1": 1, "b1": 2, "a2": 3, "v": 1})

    async def main():
        async def slot_a():
            await hub.run_tasks("step 1: designs", [Task("a1")])
            await hub.run_tasks("step 1: designs", [Task("a2")])  # a retry: the total grows

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slot_a)
            nursery.start_soon(hub.run_tasks, "step 1: designs", [Task("b1")])
            await trio.sleep(0.5)
            await hub.run_tasks("step 1: revalidating 1 design", [Task("v")])  # another label: its own count

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    designs = [s for s in view.statuses if s.startswith("step 1: designs")]
    assert designs == ["step 1: designs 0/1", "step 1: designs 0/2", "step 1: designs 1/2", "step 1: designs 1/3",
                       "step 1: designs 2/3", "step 1: designs 3/3"]
    assert [s for s in view.statuses if "revalidating" in s] == ["step 1: revalidating 1 design 0/1", "step 1: revalidating 1 design 1/1"]
    logged = [line.split(" done in ")[0] for line in view.lines if " done in " in line]  # (the log's seconds are wall time)
    assert sorted(logged) == ["step 1: designs: a1", "step 1: designs: a2", "step 1: designs: b1", "step 1: revalidating 1 design: v"]
    assert hub._labels == {} and hub._progress == {}  # nothing kept once the calls end
