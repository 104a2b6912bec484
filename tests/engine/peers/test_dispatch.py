"""The dispatcher: credit-bounded sends, results to the waiter, requeue on a dead worker, retry on failure, and
lease deadlines (a silent worker's task goes to another; a worker that keeps timing out is dropped)."""

import contextlib
import time

import trio
import trio.testing
import zmq

from engine.peers.dispatch import Dispatcher, WorkerState
from engine.protocol.messages import EngineToWorker, Heartbeat, PlayResult, PlayTask, TaskFailed, WorkerToEngine
from tests.engine.builders import make_sample
from engine.protocol.transport import open_socket


@contextlib.asynccontextmanager
async def _engine_and_two_workers(tmp_path):
    """The engine's ROUTER, DEALERs "a" and "b" whose connections are up, and a nursery (cancelled at the end)."""
    address = f"ipc://{tmp_path}/d.sock"
    async with (
        open_socket(zmq.ROUTER, address, bind=True, decode=WorkerToEngine) as router,
        open_socket(zmq.DEALER, address, bind=False, decode=EngineToWorker, identity=b"a") as a,
        open_socket(zmq.DEALER, address, bind=False, decode=EngineToWorker, identity=b"b") as b,
        trio.open_nursery() as nursery,
    ):
        for dealer in (a, b):  # the router can address a peer only once its connection is up
            await dealer.send(Heartbeat(worker_id="x", policy_version=0, busy=0))
            await router.receive_from()
        yield router, a, b, nursery
        nursery.cancel_scope.cancel()


def _worker(ident: bytes, slots: int) -> WorkerState:
    return WorkerState(ident=ident, worker_id=ident.decode(), slots=slots, isolation="", backend="", policy_version=0,
                       last_seen=time.monotonic())


def _task(i):
    return PlayTask(task_id=f"t{i}", env_id="e", skill="s", code="", hint="", arm="no_hint", seed=i, step=0)


def test_tasks_respect_slots_and_are_requeued_from_a_dead_worker(tmp_path):
    async def main():
      with trio.fail_after(20):
        async with _engine_and_two_workers(tmp_path) as (router, a, b, nursery):
            dispatcher = Dispatcher(router, retries=1)
            await nursery.start(dispatcher.run)
            dispatcher.add_worker(_worker(b"a", 2))
            results = {}

            async def run():
                results["all"] = await dispatcher.run_tasks([_task(i) for i in range(3)])

            nursery.start_soon(run)
            got_a = [await a.receive(), await a.receive()]
            await trio.testing.wait_all_tasks_blocked()  # the dispatcher has done all it can
            assert dispatcher.in_flight() == 2  # the third waits: worker a has 2 slots
            dispatcher.drop_worker(b"a")  # a dies: its tasks go back to the queue
            dispatcher.add_worker(_worker(b"b", 4))
            got_b = [await b.receive() for _ in range(3)]
            assert sorted(t.task_id for t in got_b) == ["t0", "t1", "t2"]
            assert {t.task_id for t in got_a} <= {"t0", "t1", "t2"}
            dispatcher.complete(b"b", TaskFailed(task_id="t0", worker_id="b", reason="boom"))  # retried once
            retried = await b.receive()
            assert retried.task_id == "t0"
            dispatcher.complete(b"b", TaskFailed(task_id="t0", worker_id="b", reason="final"))  # second failure: given up
            for task_id in ("t1", "t2"):  # each fails once, is retried, fails again
                dispatcher.complete(b"b", TaskFailed(task_id=task_id, worker_id="b", reason="first"))
                assert (await b.receive()).task_id == task_id
                dispatcher.complete(b"b", TaskFailed(task_id=task_id, worker_id="b", reason="final"))
            while "all" not in results:  # the waiter wakes on the last result
                await trio.sleep(0.01)
            assert [r.task_id for r in results["all"]] == ["t0", "t1", "t2"]

    trio.run(main)


def test_a_lease_past_its_deadline_goes_to_another_worker_and_a_worker_that_keeps_timing_out_is_dropped(tmp_path):
    """Worker a takes tasks and never answers: each lease passes its deadline, the task goes to worker b, which
    answers; a's second timeout drops it. A task no worker answers fails after its retries instead of hanging."""
    timeouts = []

    async def main():
      with trio.fail_after(30):
        async with _engine_and_two_workers(tmp_path) as (router, a, b, nursery):
            dispatcher = Dispatcher(router, retries=1, deadline_s=lambda task: 0.3, max_timeouts=2)
            await nursery.start(dispatcher.run)
            nursery.start_soon(dispatcher.watch_liveness, 3600.0, lambda state: None,
                               lambda state, task_id, dropped: timeouts.append((state.worker_id, task_id, dropped)))
            dispatcher.add_worker(_worker(b"a", 2))
            results = {}

            async def run():
                results["all"] = await dispatcher.run_tasks([_task(0), _task(1)])

            nursery.start_soon(run)
            assert sorted([(await a.receive()).task_id, (await a.receive()).task_id]) == ["t0", "t1"]  # a holds both, silent
            while dispatcher.workers.get(b"a") is not None:  # heartbeats keep it alive; only the deadline catches it
                dispatcher.seen(b"a")
                await trio.sleep(0.05)
            assert sorted(t for _, t, _ in timeouts) == ["t0", "t1"] and timeouts[-1][2] is True  # the second drops a
            dispatcher.add_worker(_worker(b"b", 2))
            first = await b.receive()
            dispatcher.complete(b"b", _answer(first.task_id))
            second = await b.receive()  # b is silent on this one too: its second lease fails it for good
            while "all" not in results:
                dispatcher.seen(b"b")
                await trio.sleep(0.05)
            got = {r.task_id: r for r in results["all"]}
            assert not isinstance(got[first.task_id], TaskFailed)
            assert isinstance(got[second.task_id], TaskFailed) and "lease deadline" in got[second.task_id].reason
            assert dispatcher.leases.counters["timed_out_tasks"] == 3 and dispatcher.leases.counters["timed_out_workers"] == 1

    trio.run(main)



def _answer(task_id):
    return PlayResult(task_id=task_id, worker_id="b", env_id="e", arm="no_hint", seed=0, status="completed", failure="",
                      episode_return=1.0, turns=[], agent=make_sample(task_id, "agent", "e", "s", "no_hint", 0),
                      tokens_generated=1, seconds=0.1)


def test_a_task_whose_lease_passed_goes_first_to_a_worker_that_did_not_let_it_pass(tmp_path):
    """a lets t0's lease pass; a is the least loaded worker then, but t0 goes to b (busy with t1)."""

    async def main():
      with trio.fail_after(30):
        async with _engine_and_two_workers(tmp_path) as (router, a, b, nursery):
            dispatcher = Dispatcher(router, retries=3, deadline_s=lambda task: 0.3 if task.task_id == "t0" else 3600.0, max_timeouts=0)
            await nursery.start(dispatcher.run)
            dispatcher.add_worker(_worker(b"b", 4))
            nursery.start_soon(dispatcher.run_tasks, [_task(1)])
            assert (await b.receive()).task_id == "t1"  # b is busy with t1 from now on
            dispatcher.add_worker(_worker(b"a", 4))
            nursery.start_soon(dispatcher.run_tasks, [_task(0)])
            assert (await a.receive()).task_id == "t0"  # a is the least loaded: it gets t0, and lets it pass
            nursery.start_soon(dispatcher.watch_liveness, 3600.0, lambda state: None)
            assert (await b.receive()).task_id == "t0"  # a is still the least loaded, but t0 goes to b
            assert dispatcher.workers[b"a"].timeouts == 1 and b"a" in dispatcher.workers  # max_timeouts 0: never dropped

    trio.run(main)


def test_a_worker_that_heartbeats_but_leaves_its_tasks_unread_is_dropped_within_its_own_beats(tmp_path):
    """Worker a's heartbeats never count t0 as read: on the 3rd beat it is dropped (unread_heartbeats = 3), counted,
    and t0 goes to b. Beats that count the task read, however many, keep a worker; so does one beat short."""

    async def main():
      with trio.fail_after(20):
        async with _engine_and_two_workers(tmp_path) as (router, a, b, nursery):
            dispatcher = Dispatcher(router, retries=1, unread_heartbeats=3)
            await nursery.start(dispatcher.run)
            dispatcher.add_worker(_worker(b"a", 1))
            nursery.start_soon(dispatcher.run_tasks, [_task(0), _task(1)])
            await trio.testing.wait_all_tasks_blocked()
            assert dispatcher.in_flight() == 1  # t0 leased to a
            assert dispatcher.heartbeat(b"a", 0, tasks_received=0) is not None
            assert dispatcher.heartbeat(b"a", 0, tasks_received=0) is not None  # two beats short of read: kept
            assert dispatcher.heartbeat(b"a", 0, tasks_received=0) is None  # the third: dropped
            assert b"a" not in dispatcher.workers and dispatcher.leases.counters["unread_workers"] == 1
            dispatcher.add_worker(_worker(b"b", 2))
            got = sorted([(await b.receive()).task_id, (await b.receive()).task_id])
            assert got == ["t0", "t1"]
            for _ in range(10):  # b says it read both: never dropped
                assert dispatcher.heartbeat(b"b", 0, tasks_received=2) is not None
            dispatcher.complete(b"b", _answer("t0"))
            assert dispatcher.workers[b"b"].send_seq == {} and dispatcher.workers[b"b"].unread_beats == {}
            assert dispatcher.heartbeat(b"c", 0, tasks_received=0) is None and dispatcher.leases.counters["unread_workers"] == 1  # a stranger

    trio.run(main)


def test_unread_heartbeats_zero_never_drops_a_worker(tmp_path):
    async def main():
      with trio.fail_after(20):
        async with _engine_and_two_workers(tmp_path) as (router, a, b, nursery):
            dispatcher = Dispatcher(router, unread_heartbeats=0)
            await nursery.start(dispatcher.run)
            dispatcher.add_worker(_worker(b"a", 1))
            nursery.start_soon(dispatcher.run_tasks, [_task(0)])
            await trio.testing.wait_all_tasks_blocked()
            for _ in range(20):
                assert dispatcher.heartbeat(b"a", 0, tasks_received=0) is not None

    trio.run(main)
