"""Supervision of the run's children: restarts counted per window of time, not over the whole run."""

from pathlib import Path

import pytest
import trio
import trio.testing

from engine.peers.processes import ChildFailed, learner_command, supervise


class _Proc:
    def __init__(self, child):
        self.child = child

    def poll(self):
        return self.child.exit_codes.pop(0) if self.child.exit_codes else None


class _FakeChild:
    """A child that dies at the polls named in `deaths` (poll numbers), else runs."""

    name = "worker-w0"
    log = Path("/dev/null")

    def __init__(self, deaths_at_s: list[float]):
        self.deaths_at_s = sorted(deaths_at_s)
        self.restarts = 0
        self.starts = 0
        self.exit_codes: list[int] = []
        self.proc = _Proc(self)

    def start(self):
        self.starts += 1


async def _kill_at(child: _FakeChild):
    for when in child.deaths_at_s:
        await trio.sleep_until(when)
        child.exit_codes.append(1)


def _run(child: _FakeChild, until_s: float, max_restarts: int = 3, window_s: float = 600.0):
    async def main():
        with trio.move_on_after(until_s):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_kill_at, child)
                await supervise(child, restartable=True, max_restarts=max_restarts, on_exit=lambda c, code: None, stopping=lambda: False, window_s=window_s)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_worker_that_crashes_now_and_then_keeps_being_restarted():
    child = _FakeChild([100.0 + 400.0 * i for i in range(6)])  # six crashes, 400 s apart: never 4 in 600 s
    _run(child, until_s=3000)
    assert child.restarts == 6 and child.starts == 7


def test_a_worker_that_crashes_in_a_loop_ends_the_run():
    child = _FakeChild([10.0, 20.0, 30.0, 40.0])  # the fourth crash within 600 s
    with pytest.RaisesGroup(pytest.RaisesExc(ChildFailed, match="worker-w0 exited with code 1")):
        _run(child, until_s=3000)
    assert child.restarts == 3


def test_learner_command():
    assert learner_command("py", "/runs/a", 1) == ["py", "-m", "learner.train", "--run-dir", "/runs/a"]
    assert learner_command("py", "/runs/a", 2)[:3] == ["py", "-m", "torch.distributed.run"]
