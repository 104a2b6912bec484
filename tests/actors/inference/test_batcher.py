"""The batcher: concurrent requests grouped into one backend call, weights swapped only between calls, failures
kept to their batch, and natively concurrent backends served request by request. How a task waits for its policy
version (`hold`) is test_batcher_hold.py."""

import re
import threading

import pytest
import trio
import trio.testing

from actors.inference.batcher import Batcher, GeneratorClock
from tests.actors.inference.batcher_helpers import ConcurrentBackend, RecordingBackend, ask, queue, serve, until


def test_concurrent_requests_from_many_tasks_share_one_generate_call():
    backend = RecordingBackend()
    batcher = Batcher(backend, max_batch=4, wait_s=2.0)  # the batch closes as soon as it is full
    results = {}

    async def body(nursery):
        async with trio.open_nursery() as callers:
            for key in range(4):
                callers.start_soon(ask, batcher, key, results)

    serve(batcher, body)
    assert len(backend.calls) == 1 and sorted(backend.calls[0][0]) == [0, 1, 2, 3]
    assert {key: r.text for key, r in results.items()} == {key: f"reply {key}" for key in range(4)}


def test_batches_are_bounded_by_max_batch_and_replies_reach_their_callers():
    backend = RecordingBackend()
    batcher = Batcher(backend, max_batch=2, wait_s=0.01)
    results = {}

    async def main():
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await queue(nursery, batcher, range(5), results)
                await nursery.start(batcher.run)
                await until(lambda: len(results) == 5)
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
        nursery.start_soon(ask, batcher, 0, results)
        await until(backend.entered.is_set)  # generate is running in the batcher's thread
        batcher.request_weights(1, "v1")
        batcher.request_weights(2, "v2")  # supersedes v1: only the newest is loaded
        batcher.request_weights(2, "v2-again")  # equal to the pending one: ignored
        batcher.request_weights(1, "v1-again")  # older than the pending one: ignored
        await trio.testing.wait_all_tasks_blocked()  # the batcher waits on its call, not on the new weights
        assert backend.loads == [] and batcher.policy_version == 0  # never in the middle of a call
        backend.release.set()
        await until(lambda: 0 in results)
        await ask(batcher, 1, results)

    serve(batcher, body)
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
        await ask(batcher, 0, results)
        batcher.request_weights(3, "v3-again")  # equal to the loaded version
        batcher.request_weights(2, "v2")  # older
        await ask(batcher, 1, results)

    serve(batcher, body)
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
                await queue(nursery, batcher, [0, 1, 2], results)  # batches [0, 1] (poisoned) and [2]
                await nursery.start(batcher.run)
                await until(lambda: len(results) == 3)
                await ask(batcher, 3, results)  # still serving afterwards
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
                await queue(nursery, batcher, range(5), results)  # batches [0, 1, 2] and [3, 4]
                await nursery.start(batcher.run)
                await until(lambda: len(results) == 5)
                batcher.request_weights(4, "v4")
                await ask(batcher, 9, results)
                nursery.cancel_scope.cancel()

    trio.run(main)
    stats = batcher.statistics()
    assert (stats.batches, stats.requests) == (3, 6)
    assert stats.tokens_generated == sum(key + 1 for key in (0, 1, 2, 3, 4, 9))
    assert stats.policy_version == 4 and stats.busy_seconds >= 0.0



def test_a_concurrent_backend_serves_requests_as_they_come_and_swaps_weights_before_the_next():
    backend = ConcurrentBackend()
    batcher = Batcher(backend, max_batch=2, wait_s=5.0)  # neither bound applies to a concurrent backend
    results = {}

    async def body(nursery):
        for key in range(3):
            nursery.start_soon(ask, batcher, key, results)
        await until(lambda: backend.active == 3)  # all three in flight at once, beyond max_batch
        batcher.request_weights(1, "v1")
        await trio.testing.wait_all_tasks_blocked()
        assert backend.loads == []  # pending until the next request arrives
        released = set()
        for key in (2, 0, 1):  # finishing out of order: each reply goes to its caller as it is ready
            backend.gates[key].set()
            released.add(key)
            await until(lambda key=key: key in results)
            await trio.testing.wait_all_tasks_blocked()
            assert set(results) == released
        backend.gates[3] = trio.Event()
        backend.gates[3].set()
        await ask(batcher, 3, results)
        batcher.request_weights(1, "v1-again")  # not newer than the loaded version: ignored
        backend.gates[4] = trio.Event()
        backend.gates[4].set()
        await ask(batcher, 4, results)

    serve(batcher, body)
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
            nursery.start_soon(ask, batcher, key, results)
        await until(lambda: backend.active == 2)
        backend.gates[-1].set()
        await until(lambda: -1 in results)
        assert 1 not in results  # the other request is still running
        backend.gates[1].set()
        await until(lambda: 1 in results)

    serve(batcher, body)
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
                callers.start_soon(ask, batcher, key, results)

    serve(batcher, body)
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
        nursery.start_soon(ask, batcher, 0, results)
        await trio.to_thread.run_sync(backend.loading.wait)
        batcher.request_weights(2, "/v2")  # out of order
        batcher.request_weights(3, "/v3")  # repeated
        backend.loaded.set()
        await until(lambda: 0 in results)
        await ask(batcher, 1, results)

    serve(batcher, body)
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
            await queue(callers, batcher, [0, 1], results)

    serve(batcher, body)
    assert len(results) == 2  # both callers answered (one batch of 2, or two of 1 on a slow machine)
    assert all(isinstance(r, RuntimeError) and re.search(r"returned \d generations for \d requests", str(r)) for r in results.values())


def test_the_generator_clock_counts_busy_wall_time_and_the_generations_running():
    now = [0.0]
    clock = GeneratorClock(now=lambda: now[0])
    clock.started(2)  # a thread batch of two
    now[0] = 3.0
    clock.started()  # one more joins (a concurrent backend)
    now[0] = 4.0
    clock.finished(3)
    now[0] = 10.0  # idle: counts nowhere
    clock.started()
    now[0] = 11.0
    busy, sequences = clock.totals()  # the running interval counts up to now
    assert busy == 5.0 and sequences == 2 * 3 + 3 * 1 + 1 * 1


def test_statistics_carry_the_sequence_integral():
    batcher = Batcher(RecordingBackend(), max_batch=3, wait_s=0.01)
    results = {}

    async def main():
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await nursery.start(batcher.run)
                batcher.request_weights(2, "v2")
                await queue(nursery, batcher, range(3), results)
                await until(lambda: len(results) == 3)
                nursery.cancel_scope.cancel()

    trio.run(main)
    stats = batcher.statistics()
    assert stats.policy_version == 2
    assert stats.sequence_seconds >= stats.busy_seconds >= 0.0
