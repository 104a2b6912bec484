"""The batcher: concurrent requests grouped into one backend call, weights swapped only between calls, failures
kept to their batch, natively concurrent backends served request by request, and `hold` (a task waits for its
policy version)."""

import re
import threading

import pytest
import trio
import trio.testing

from actors.inference.base import Generation, GenerationRequest, InferenceBackend
from actors.inference.batcher import Batcher


def _request(key: int) -> GenerationRequest:
    """A request named by its first prompt token, so every reply can be traced back to its caller."""
    return GenerationRequest(prompt_ids=[key], max_new_tokens=16, temperature=1.0)


def _reply(request: GenerationRequest, version: int) -> Generation:
    key = request.prompt_ids[0]
    n = key + 1  # a length per caller, so token counts are checkable
    return Generation(completion_ids=[key] * n, logprobs=[-0.5] * n, text=f"reply {key}", finish_reason="length", policy_version=version)


class RecordingBackend(InferenceBackend):
    """A blocking backend that records each batch and the version it ran under.

    `release` is open unless a test closes it; a closed one holds `generate` (in the batcher's thread) until the
    test opens it, and `entered` tells the test that a call has begun. Requests whose key is in `poison` fail
    their whole batch.
    """

    name = "recording"

    def __init__(self, poison=()):
        self.calls: list[tuple[list[int], int]] = []
        self.loads: list[tuple[str, int, bool]] = []  # (path, version, whether a generate call was running)
        self.poison = set(poison)
        self.generating = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    @property
    def tokenizer(self):
        return None

    def generate(self, requests):
        self.generating = True
        try:
            version = self.policy_version
            self.calls.append(([r.prompt_ids[0] for r in requests], version))
            self.entered.set()
            if not self.release.wait(timeout=10):
                raise TimeoutError("the test never released generate")
            if any(r.prompt_ids[0] in self.poison for r in requests):
                raise RuntimeError("boom")
            assert self.policy_version == version, "weights changed in the middle of a generate call"
            return [_reply(r, version) for r in requests]
        finally:
            self.generating = False

    def load_weights(self, path, version):
        self.loads.append((path, version, self.generating))
        self.policy_version = version


async def _ask(batcher, key, results):
    try:
        results[key] = await batcher.generate(_request(key))
    except Exception as exc:
        results[key] = exc


async def _queue(nursery, batcher, keys, results):
    """Callers for `keys`, each queued (blocked on its reply) before the next starts: a known channel order."""
    for key in keys:
        nursery.start_soon(_ask, batcher, key, results)
        await trio.testing.wait_all_tasks_blocked()


def _serve(batcher, body, timeout_s: float = 10.0) -> None:
    """Run `body(nursery)` while `batcher` serves in the same nursery, then stop it."""

    async def main():
        with trio.fail_after(timeout_s):
            async with trio.open_nursery() as nursery:
                await nursery.start(batcher.run)
                await body(nursery)
                nursery.cancel_scope.cancel()

    trio.run(main)


async def _until(predicate):
    while not predicate():
        await trio.sleep(0.001)


def test_concurrent_requests_from_many_tasks_share_one_generate_call():
    backend = RecordingBackend()
    batcher = Batcher(backend, max_batch=4, wait_s=2.0)  # the batch closes as soon as it is full
    results = {}

    async def body(nursery):
        async with trio.open_nursery() as callers:
            for key in range(4):
                callers.start_soon(_ask, batcher, key, results)

    _serve(batcher, body)
    assert len(backend.calls) == 1 and sorted(backend.calls[0][0]) == [0, 1, 2, 3]
    assert {key: r.text for key, r in results.items()} == {key: f"reply {key}" for key in range(4)}


def test_batches_are_bounded_by_max_batch_and_replies_reach_their_callers():
    backend = RecordingBackend()
    batcher = Batcher(backend, max_batch=2, wait_s=0.01)
    results = {}

    async def main():
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await _queue(nursery, batcher, range(5), results)
                await nursery.start(batcher.run)
                await _until(lambda: len(results) == 5)
                nursery.cancel_scope.cancel()

    trio.run(main)
    assert [keys for keys, _ in backend.calls] == [[0, 1], [2, 3], [4]]
    for key, generation in results.items():
        assert generation.text == f"reply {key}" and generation.completion_ids == [key] * (key + 1)


def test_weights_requested_during_a_call_are_applied_before_the_next_one():
    backend = RecordingBackend()
    batcher = Batcher(backend, max_batch=4, wait_s=0.01)
    results = {}

    async def body(nursery):
        backend.release.clear()
        nursery.start_soon(_ask, batcher, 0, results)
        await _until(backend.entered.is_set)  # generate is running in the batcher's thread
        batcher.request_weights(1, "v1")
        batcher.request_weights(2, "v2")  # supersedes v1: only the newest is loaded
        batcher.request_weights(2, "v2-again")  # equal to the pending one: ignored
        batcher.request_weights(1, "v1-again")  # older than the pending one: ignored
        await trio.testing.wait_all_tasks_blocked()  # the batcher waits on its call, not on the new weights
        assert backend.loads == [] and batcher.policy_version == 0  # never in the middle of a call
        backend.release.set()
        await _until(lambda: 0 in results)
        await _ask(batcher, 1, results)

    _serve(batcher, body)
    assert backend.loads == [("v2", 2, False)]
    assert backend.calls == [([0], 0), ([1], 2)]
    assert results[0].policy_version == 0 and results[1].policy_version == 2
    assert batcher.policy_version == 2 and batcher.statistics().policy_version == 2


def test_weights_not_newer_than_the_loaded_version_are_ignored():
    backend = RecordingBackend()
    batcher = Batcher(backend, max_batch=4, wait_s=0.01)
    results = {}

    async def body(nursery):
        batcher.request_weights(3, "v3")
        await _ask(batcher, 0, results)
        batcher.request_weights(3, "v3-again")  # equal to the loaded version
        batcher.request_weights(2, "v2")  # older
        await _ask(batcher, 1, results)

    _serve(batcher, body)
    assert backend.loads == [("v3", 3, False)]
    assert backend.calls == [([0], 3), ([1], 3)]
    assert results[1].policy_version == 3


def test_a_backend_exception_fails_exactly_its_batch_and_the_batcher_goes_on():
    backend = RecordingBackend(poison={0})
    batcher = Batcher(backend, max_batch=2, wait_s=0.01)
    results = {}

    async def main():
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await _queue(nursery, batcher, [0, 1, 2], results)  # batches [0, 1] (poisoned) and [2]
                await nursery.start(batcher.run)
                await _until(lambda: len(results) == 3)
                await _ask(batcher, 3, results)  # still serving afterwards
                nursery.cancel_scope.cancel()

    trio.run(main)
    assert [keys for keys, _ in backend.calls] == [[0, 1], [2], [3]]
    for key in (0, 1):
        assert isinstance(results[key], RuntimeError) and str(results[key]) == "boom"
    assert results[2].text == "reply 2" and results[3].text == "reply 3"
    stats = batcher.statistics()
    assert (stats.batches, stats.requests, stats.tokens_generated) == (3, 4, 3 + 4)  # failed requests add no tokens


def test_statistics_count_batches_requests_and_tokens():
    backend = RecordingBackend()
    batcher = Batcher(backend, max_batch=3, wait_s=0.01)
    results = {}
    assert batcher.statistics() == type(batcher.statistics())(0, 0, 0, 0.0, 0)

    async def main():
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await _queue(nursery, batcher, range(5), results)  # batches [0, 1, 2] and [3, 4]
                await nursery.start(batcher.run)
                await _until(lambda: len(results) == 5)
                batcher.request_weights(4, "v4")
                await _ask(batcher, 9, results)
                nursery.cancel_scope.cancel()

    trio.run(main)
    stats = batcher.statistics()
    assert (stats.batches, stats.requests) == (3, 6)
    assert stats.tokens_generated == sum(key + 1 for key in (0, 1, 2, 3, 4, 9))
    assert stats.policy_version == 4 and stats.busy_seconds >= 0.0


class ConcurrentBackend(InferenceBackend):
    """A natively concurrent backend: each `generate_async` call waits on its own trio event, set by the test."""

    name = "concurrent"

    def __init__(self):
        self.gates: dict[int, trio.Event] = {}
        self.started: list[tuple[int, int]] = []  # (key, version it was served under)
        self.loads: list[tuple[str, int, int]] = []  # (path, version, calls in flight)
        self.active = 0
        self.most_active = 0

    @property
    def tokenizer(self):
        return None

    def generate(self, requests):
        raise AssertionError("a natively concurrent backend is served through generate_async")

    async def generate_async(self, request):
        key = request.prompt_ids[0]
        version = self.policy_version
        self.started.append((key, version))
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            await self.gates.setdefault(key, trio.Event()).wait()
            if key < 0:
                raise ValueError(f"bad request {key}")
            return _reply(request, version)
        finally:
            self.active -= 1

    def load_weights(self, path, version):
        self.loads.append((path, version, self.active))
        self.policy_version = version


def test_a_concurrent_backend_serves_requests_as_they_come_and_swaps_weights_before_the_next():
    backend = ConcurrentBackend()
    batcher = Batcher(backend, max_batch=2, wait_s=5.0)  # neither bound applies to a concurrent backend
    results = {}

    async def body(nursery):
        for key in range(3):
            nursery.start_soon(_ask, batcher, key, results)
        await _until(lambda: backend.active == 3)  # all three in flight at once, beyond max_batch
        batcher.request_weights(1, "v1")
        await trio.testing.wait_all_tasks_blocked()
        assert backend.loads == []  # pending until the next request arrives
        released = set()
        for key in (2, 0, 1):  # finishing out of order: each reply goes to its caller as it is ready
            backend.gates[key].set()
            released.add(key)
            await _until(lambda key=key: key in results)
            await trio.testing.wait_all_tasks_blocked()
            assert set(results) == released
        backend.gates[3] = trio.Event()
        backend.gates[3].set()
        await _ask(batcher, 3, results)
        batcher.request_weights(1, "v1-again")  # not newer than the loaded version: ignored
        backend.gates[4] = trio.Event()
        backend.gates[4].set()
        await _ask(batcher, 4, results)

    _serve(batcher, body)
    assert backend.most_active == 3
    assert sorted(backend.started) == [(0, 0), (1, 0), (2, 0), (3, 1), (4, 1)]
    assert backend.loads == [("v1", 1, 0)]
    assert {key: r.text for key, r in results.items()} == {key: f"reply {key}" for key in range(5)}
    assert results[3].policy_version == 1
    stats = batcher.statistics()
    assert (stats.batches, stats.requests, stats.tokens_generated, stats.policy_version) == (5, 5, 1 + 2 + 3 + 4 + 5, 1)


def test_a_concurrent_backend_exception_fails_only_its_request():
    backend = ConcurrentBackend()
    batcher = Batcher(backend, max_batch=2, wait_s=0.01)
    results = {}

    async def body(nursery):
        for key in (-1, 1):
            nursery.start_soon(_ask, batcher, key, results)
        await _until(lambda: backend.active == 2)
        backend.gates[-1].set()
        await _until(lambda: -1 in results)
        assert 1 not in results  # the other request is still running
        backend.gates[1].set()
        await _until(lambda: 1 in results)

    _serve(batcher, body)
    assert isinstance(results[-1], ValueError) and "bad request" in str(results[-1])
    assert results[1].text == "reply 1"
    stats = batcher.statistics()
    assert (stats.batches, stats.requests, stats.tokens_generated) == (2, 2, 2)


@pytest.mark.parametrize("max_batch", [1, 3])
def test_every_request_is_answered_when_callers_outnumber_the_channel(max_batch):
    """More callers than the bounded request channel holds: senders wait, and none is lost or answered twice."""
    backend = RecordingBackend()
    batcher = Batcher(backend, max_batch=max_batch, wait_s=0.001)
    results = {}
    n = max_batch * 4 * 3

    async def body(nursery):
        async with trio.open_nursery() as callers:
            for key in range(n):
                callers.start_soon(_ask, batcher, key, results)

    _serve(batcher, body)
    served = [key for keys, _ in backend.calls for key in keys]
    assert sorted(served) == list(range(n)) and all(len(keys) <= max_batch for keys, _ in backend.calls)
    assert all(results[key].text == f"reply {key}" for key in range(n))


class SlowLoadingBackend(RecordingBackend):
    """`load_weights` waits for `loaded` (in the batcher's thread), so a test can act while a load is running."""

    def __init__(self):
        super().__init__()
        self.loading = threading.Event()
        self.loaded = threading.Event()

    def load_weights(self, path, version):
        self.loading.set()
        if not self.loaded.wait(timeout=10):
            raise TimeoutError("the test never finished the load")
        super().load_weights(path, version)


def test_a_request_for_an_older_or_the_same_version_during_a_load_is_ignored():
    backend = SlowLoadingBackend()
    batcher = Batcher(backend, max_batch=1, wait_s=0.0)
    results = {}

    async def body(nursery):
        batcher.request_weights(3, "/v3")
        nursery.start_soon(_ask, batcher, 0, results)
        await trio.to_thread.run_sync(backend.loading.wait)
        batcher.request_weights(2, "/v2")  # out of order
        batcher.request_weights(3, "/v3")  # repeated
        backend.loaded.set()
        await _until(lambda: 0 in results)
        await _ask(batcher, 1, results)

    _serve(batcher, body)
    assert [(path, version) for path, version, _ in backend.loads] == [("/v3", 3)]
    assert [version for _, version in backend.calls] == [3, 3]


class ShortBackend(RecordingBackend):
    def generate(self, requests):
        return super().generate(requests)[:-1]


def test_a_backend_that_answers_fewer_requests_fails_the_batch_instead_of_hanging():
    backend = ShortBackend()
    batcher = Batcher(backend, max_batch=2, wait_s=0.01)
    results = {}

    async def body(nursery):
        async with trio.open_nursery() as callers:
            await _queue(callers, batcher, [0, 1], results)

    _serve(batcher, body)
    assert len(results) == 2  # both callers answered (one batch of 2, or two of 1 on a slow machine)
    assert all(isinstance(r, RuntimeError) and re.search(r"returned \d generations for \d requests", str(r)) for r in results.values())


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
        nursery.start_soon(_ask, batcher, 0, results)
        await trio.to_thread.run_sync(backend.loading.wait)
        nursery.start_soon(_ask, batcher, 1, results)
        await trio.testing.wait_all_tasks_blocked()
        assert backend.started == []  # neither runs while the load does
        backend.loaded.set()
        await _until(lambda: len(results) == 2)

    _serve(batcher, body)
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

    _serve(batcher, body)
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
        await _until(lambda: 1 in held)
        await hold(3, 0.05)  # never requested: False after the bound, and the batcher holds v1 still

    _serve(batcher, body)
    assert held == {1: True, 3: False} and backend.loads == [("v1", 1, False)] and batcher.policy_version == 1


def test_hold_waits_for_a_running_batch_before_it_loads():
    """A thread-driven backend never loads in the middle of a generate call, hold or no hold."""
    backend = RecordingBackend()
    batcher = Batcher(backend, max_batch=4, wait_s=0.01)
    results, held = {}, []

    async def body(nursery):
        backend.release.clear()
        nursery.start_soon(_ask, batcher, 0, results)
        await _until(backend.entered.is_set)
        batcher.request_weights(1, "v1")

        async def hold():
            held.append(await batcher.hold(1, wait_s=5.0))

        nursery.start_soon(hold)
        await trio.testing.wait_all_tasks_blocked()
        assert held == [] and backend.loads == []
        backend.release.set()
        await _until(lambda: held)

    _serve(batcher, body)
    assert held == [True] and backend.loads == [("v1", 1, False)] and results[0].policy_version == 0
