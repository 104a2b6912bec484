"""The timed fake backend: log-normal lengths within their caps, boxed answers, and a fixed time per token for
every request however many run at once (checked on trio's virtual clock, never the wall clock)."""

import re
import statistics

import pytest
import trio
import trio.testing

from actors.inference.base import GenerationRequest
from actors.inference.batcher import Batcher
from actors.inference.timed import TimedBackend

SECONDS_PER_TOKEN = 0.01


@pytest.fixture(scope="module")
def backend_factory(tiny_model_path):
    def make(**overrides):
        options = {"seconds_per_token": SECONDS_PER_TOKEN, "median_tokens": 60, "sigma": 0.8, "max_tokens": 200, "seed": 0}
        return TimedBackend(tiny_model_path, **(options | overrides))

    return make


def _request(max_new_tokens=1000):
    return GenerationRequest(prompt_ids=[1, 2, 3], max_new_tokens=max_new_tokens, temperature=1.0)


def _lengths(backend, n, max_new_tokens=1000):
    return [len(g.completion_ids) for g in backend.generate([_request(max_new_tokens)] * n)]


def test_lengths_follow_the_configured_median_within_their_caps(backend_factory):
    lengths = _lengths(backend_factory(), 4000)
    assert statistics.median(lengths) == pytest.approx(60, rel=0.15)
    assert min(lengths) >= 1 and max(lengths) == 200  # sigma 0.8 reaches the cap now and then
    assert len(set(lengths)) > 50  # a spread, not a constant


def test_lengths_are_capped_by_the_request_and_never_below_one(backend_factory):
    capped = _lengths(backend_factory(), 500, max_new_tokens=30)
    assert max(capped) == 30 and min(capped) >= 1
    short = _lengths(backend_factory(median_tokens=1.0, sigma=2.0), 500)  # most draws fall below one token
    assert min(short) == 1 and short.count(1) > 250


def test_the_same_seed_draws_the_same_generations(backend_factory):
    first = backend_factory(seed=7).generate([_request()] * 50)
    assert backend_factory(seed=7).generate([_request()] * 50) == first
    assert backend_factory(seed=8).generate([_request()] * 50) != first


def test_generations_are_boxed_answers_with_one_logprob_per_token(backend_factory):
    backend = backend_factory()
    generations = backend.generate([_request()] * 200)
    assert {g.text for g in generations} == {"\\boxed{1}", "\\boxed{2}"}
    assert all(re.fullmatch(r"\\boxed\{[12]\}", g.text) for g in generations)
    vocab = len(backend.tokenizer)
    for g in generations:
        assert len(g.logprobs) == len(g.completion_ids)
        assert all(0 <= token < vocab for token in g.completion_ids)
        assert g.finish_reason == "length"


def test_policy_version_follows_load_weights(backend_factory):
    backend = backend_factory()
    assert backend.generate([_request()])[0].policy_version == 0
    backend.load_weights("ignored", 3)
    assert backend.policy_version == 3 and backend.generate([_request()])[0].policy_version == 3

    async def main():
        return await backend.generate_async(_request())

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)).policy_version == 3


def _timed_run(backend, n):
    """n concurrent generate_async calls on the virtual clock: each one's (length, seconds taken), and the total."""

    async def main():
        done = []
        start = trio.current_time()

        async def one():
            generation = await backend.generate_async(_request())
            done.append((len(generation.completion_ids), trio.current_time() - start))

        with trio.fail_after(1000):
            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(one)
        return done, trio.current_time() - start

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_one_request_takes_its_length_times_seconds_per_token(backend_factory):
    [(length, took)], total = _timed_run(backend_factory(), 1)
    assert took == pytest.approx(length * SECONDS_PER_TOKEN, abs=1e-9) and total == pytest.approx(took, abs=1e-9)


def test_concurrent_requests_take_no_longer_than_the_longest(backend_factory):
    done, total = _timed_run(backend_factory(), 64)
    lengths = [length for length, _ in done]
    assert len(set(lengths)) > 1
    assert total == pytest.approx(max(lengths) * SECONDS_PER_TOKEN, abs=1e-9)
    for length, took in done:  # each one's time is its own length's, however many run alongside
        assert took == pytest.approx(length * SECONDS_PER_TOKEN, abs=1e-9)


def test_a_capacity_limits_how_many_decode_at_once(backend_factory):
    """Capacity 1: the requests run one after another, so the total is the sum of their times; capacity 2 of
    four equal requests takes two rounds."""
    done, total = _timed_run(backend_factory(capacity=1), 5)
    assert total == pytest.approx(sum(length for length, _ in done) * SECONDS_PER_TOKEN, abs=1e-9)
    equal = backend_factory(capacity=2, sigma=0.0, median_tokens=50)
    done, total = _timed_run(equal, 4)
    [length] = {length for length, _ in done}  # sigma 0: every request the same length
    assert total == pytest.approx(2 * length * SECONDS_PER_TOKEN, abs=1e-9)


def test_the_batcher_serves_a_timed_backend_concurrently(backend_factory):
    backend = backend_factory()
    batcher = Batcher(backend, max_batch=2, wait_s=0.05)

    async def main():
        done = []
        async with trio.open_nursery() as nursery:
            await nursery.start(batcher.run)
            start = trio.current_time()

            async def one():
                generation = await batcher.generate(_request())
                done.append((len(generation.completion_ids), trio.current_time() - start))

            with trio.fail_after(1000):
                async with trio.open_nursery() as callers:
                    for _ in range(16):
                        callers.start_soon(one)
            nursery.cancel_scope.cancel()
        return done, trio.current_time() - start

    done, total = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert len(done) == 16
    assert total == pytest.approx(max(length for length, _ in done) * SECONDS_PER_TOKEN, abs=1e-9)
    assert all(took == pytest.approx(length * SECONDS_PER_TOKEN, abs=1e-9) for length, took in done)
    assert batcher.statistics().tokens_generated == sum(length for length, _ in done)
