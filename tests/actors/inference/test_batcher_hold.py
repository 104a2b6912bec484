"""`Batcher.hold`: a task waits until the backend holds the policy version it names (actors/worker.py), and a
request that comes while a weight load runs waits for it, so neither starts on the version before (which at
`run.max_staleness = 0` was then dropped as stale)."""

import threading

import trio
import trio.testing

from actors.inference.batcher import Batcher
from tests.actors.inference.batcher_helpers import ConcurrentBackend, RecordingBackend, ask, serve, until


class SlowLoadingConcurrentBackend(ConcurrentBackend):
    """Natively concurrent (like vLLM), with a load that waits (in the batcher's thread) for the test."""

    def __init__(self):
        super().__init__()
        self.loading = threading.Event()
        self.loaded = threading.Event()

    def load_weights(self, path, version):
        self.loading.set()
        if not self.loaded.wait(timeout=10):
            raise TimeoutError("the test never finished the load")
        super().load_weights(path, version)


def test_a_concurrent_request_that_comes_during_a_load_waits_for_it_and_runs_on_the_new_version():
    """The first request of a step's plays starts the load; one that came meanwhile used to run on the old
    version (and its sample was dropped as stale at run.max_staleness = 0)."""
    backend = SlowLoadingConcurrentBackend()
    batcher = Batcher(backend, max_batch=4, wait_s=0.01)
    results = {}

    async def body(nursery):
        for key in (0, 1):
            backend.gates[key] = trio.Event()
            backend.gates[key].set()
        batcher.request_weights(1, "v1")
        nursery.start_soon(ask, batcher, 0, results)
        await trio.to_thread.run_sync(backend.loading.wait)
        nursery.start_soon(ask, batcher, 1, results)
        await trio.testing.wait_all_tasks_blocked()
        assert backend.started == []  # neither runs while the load does
        backend.loaded.set()
        await until(lambda: len(results) == 2)

    serve(batcher, body)
    assert sorted(backend.started) == [(0, 1), (1, 1)]
    assert results[0].policy_version == results[1].policy_version == 1


def test_hold_loads_a_requested_version_at_once_on_an_idle_batcher():
    backend = RecordingBackend()
    batcher = Batcher(backend, max_batch=4, wait_s=0.01)
    held = []

    async def body(nursery):
        held.append(await batcher.hold(0, wait_s=0.0))  # loaded already: no wait, no load
        batcher.request_weights(2, "v2")
        held.append(await batcher.hold(1, wait_s=5.0))  # a newer one is requested: it is loaded, without a request
        held.append(batcher.policy_version)

    serve(batcher, body)
    assert held == [True, True, 2] and backend.loads == [("v2", 2, False)] and backend.calls == []


def test_hold_waits_for_a_version_not_yet_requested_and_gives_up_after_wait_s():
    backend = RecordingBackend()
    batcher = Batcher(backend, max_batch=4, wait_s=0.01)
    held = {}

    async def hold(version, wait_s):
        held[version] = await batcher.hold(version, wait_s=wait_s)

    async def body(nursery):
        nursery.start_soon(hold, 1, 5.0)
        await trio.testing.wait_all_tasks_blocked()
        assert held == {}  # its PolicyUpdate is on its way
        batcher.request_weights(1, "v1")
        await until(lambda: 1 in held)
        await hold(3, 0.05)  # never requested: False after the bound, and the batcher holds v1 still

    serve(batcher, body)
    assert held == {1: True, 3: False} and backend.loads == [("v1", 1, False)] and batcher.policy_version == 1


def test_hold_waits_for_a_running_batch_before_it_loads():
    """A thread-driven backend never loads in the middle of a generate call, hold or no hold."""
    backend = RecordingBackend()
    batcher = Batcher(backend, max_batch=4, wait_s=0.01)
    results, held = {}, []

    async def body(nursery):
        backend.release.clear()
        nursery.start_soon(ask, batcher, 0, results)
        await until(backend.entered.is_set)
        batcher.request_weights(1, "v1")

        async def hold():
            held.append(await batcher.hold(1, wait_s=5.0))

        nursery.start_soon(hold)
        await trio.testing.wait_all_tasks_blocked()
        assert held == [] and backend.loads == []
        backend.release.set()
        await until(lambda: held)

    serve(batcher, body)
    assert held == [True] and backend.loads == [("v1", 1, False)] and results[0].policy_version == 0
