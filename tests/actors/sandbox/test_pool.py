"""The sandbox pool: episodes, failures by kind, worker replacement, concurrency, cancellation, dying with the
parent. Each test runs its own small pool inside `trio.run`."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import trio

from actors.sandbox import EpisodeFailed, IsolationLevel, StepResult, open_sandbox_pool
from tests.actors.sandbox.sandbox_helpers import GUESS_SOURCE, play_guess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def env_source(reset_body: str = 'return "start", {}', step_body: str = 'return "ok", 0.0, False, False, {}',
               extra: str = "") -> str:
    """A one-class environment; the bodies are statements (several lines allowed), `extra` more methods."""
    def block(body: str, indent: int) -> str:
        return textwrap.indent(textwrap.dedent(body).strip(), " " * indent)

    return (f"class ProbeEnv:\n    def __init__(self, max_turns=12, **kwargs):\n        self.max_turns = max_turns\n\n"
            f"{block(extra, 4)}\n\n    def reset(self, seed=None):\n{block(reset_body, 8)}\n\n"
            f"    def step(self, action):\n{block(step_body, 8)}\n")


def run(async_fn, **pool_options):
    async def main():
        async with open_sandbox_pool(**{"workers": 1, "step_timeout_s": 2.0, **pool_options}) as pool:
            return await async_fn(pool)
    return trio.run(main)


def test_an_episode_resets_steps_and_solves():
    async def body(pool):
        async with pool.open_episode(GUESS_SOURCE) as episode:
            assert episode.class_name == "GuessEnv"
            observation, info = await episode.reset(seed=4)
            assert observation == "Guess a number from 1 to 10 in 12 turns." and info == {"seed": 4}
            (answer,) = await episode.solution()
            wrong = await episode.step(f"\\boxed{{{int(answer) % 10 + 1}}}")
            assert wrong.reward == 0.0 and not wrong.terminated and "guess" in wrong.info
            result = await episode.step(f"\\boxed{{{answer}}}")
            assert result == StepResult("Correct!", 1.0, True, False, {})
        return pool.statistics()

    stats = run(body)
    assert stats.episodes_served == 1 and stats.episodes_failed == 0 and stats.workers_started == 1
    assert stats.isolation in set(IsolationLevel) and stats.isolation_detail


def test_a_bare_string_reset_and_a_string_solution_are_normalised():
    source = env_source('return "just text"', extra='def solution(self):\n    return "a\\nb"\n')

    async def body(pool):
        async with pool.open_episode(source) as episode:
            return await episode.reset(seed=None), await episode.solution()

    assert run(body) == (("just text", {}), ["a", "b"])


def test_max_turns_forces_truncation_from_outside():
    async def body(pool):
        async with pool.open_episode(env_source(), max_turns=3) as episode:
            await episode.reset(seed=0)
            return [(await episode.step("x")).truncated for _ in range(3)]

    assert run(body) == [False, False, True]


def test_no_solution_method_gives_none():
    async def body(pool):
        async with pool.open_episode(env_source()) as episode:
            await episode.reset(seed=0)
            return await episode.solution()

    assert run(body) is None


@pytest.mark.parametrize(("source", "kind", "detail"), [
    ("class Nothing:\n    pass\n", "invalid", r"expected exactly one class whose name ends in 'Env', found 0"),
    ("def broken(:\n", "invalid", r"SyntaxError"),
    (env_source('raise ValueError("bad seed")'), "error", r"ValueError: bad seed$"),
    (env_source(step_body='return "ok", float("nan"), True, False, {}'), "protocol", r"^reward is nan"),
    (env_source(step_body='return "ok", 1.0, 1, 0, {}'), "protocol", r"^terminated and truncated must be bool"),
    (env_source('return 42'), "protocol", r"^reset\(\) must return \(str, dict\), got int$"),
    (env_source(step_body="while True: pass"), "timeout", r"^the call took longer than 2 s$"),
    (env_source(step_body='return "x" * 100000, 0.0, True, False, {}'), "limit", r"exceeds max_output_bytes"),
    (env_source(step_body="return [1] * (10 ** 10)"), "limit", r"MemoryError"),
])
def test_failures_have_a_kind_and_a_bounded_detail_and_the_pool_keeps_serving(source, kind, detail):
    async def body(pool):
        with pytest.raises(EpisodeFailed) as caught:
            async with pool.open_episode(source) as episode:
                await episode.reset(seed=0)
                await episode.step("\\boxed{1}")
        assert await play_guess(pool)
        return caught.value, pool.statistics()

    failure, stats = run(body, step_timeout_s=2.0 if kind == "timeout" else 30.0)  # only a hang meets the timeout
    assert failure.kind == kind
    assert len(failure.detail) <= 2000
    assert re.search(detail, failure.detail), failure.detail
    assert stats.failures_by_kind == {kind: 1}


def test_the_interface_names_are_exported():
    import actors.sandbox as sandbox

    for name in ("open_sandbox_pool", "SandboxPool", "Episode", "StepResult", "EpisodeFailed", "IsolationLevel",
                 "Verdict", "Check", "repair_fstring_braces"):
        assert name in sandbox.__all__ and hasattr(sandbox, name)


def test_an_episode_cannot_be_used_after_it_closes():
    async def body(pool):
        async with pool.open_episode(GUESS_SOURCE) as episode:
            await episode.reset(seed=0)
        with pytest.raises(trio.ClosedResourceError, match=r"^the episode is closed$"):
            await episode.step("\\boxed{1}")

    run(body)


def test_calls_after_a_failure_fail_too():
    async def body(pool):
        async with pool.open_episode(env_source('raise KeyError("k")')) as episode:
            with pytest.raises(EpisodeFailed):
                await episode.reset(seed=0)
            with pytest.raises(EpisodeFailed, match=r"^error: the episode already failed: "):
                await episode.step("x")

    run(body)


def test_a_worker_crash_is_replaced_and_only_that_episode_fails():
    source = env_source(step_body="import random\nrandom._os._exit(9)")

    async def body(pool):
        pid_before = pool._slots[0].worker.pid
        with pytest.raises(EpisodeFailed, match=r"^crashed: the worker exited with status 9"):
            async with pool.open_episode(source) as episode:
                await episode.reset(seed=0)
                await episode.step("x")
        assert await play_guess(pool)
        return pid_before, pool._slots[0].worker.pid, pool.statistics()

    before, after, stats = run(body)
    assert before != after and stats.workers_replaced == 1 and stats.workers_started == 2


def test_workers_are_replaced_after_episodes_per_worker():
    async def body(pool):
        for seed in range(5):
            assert await play_guess(pool, seed)
        return pool.statistics()

    stats = run(body, episodes_per_worker=2)
    assert stats.episodes_served == 5 and stats.workers_replaced == 2 and stats.episodes_failed == 0


def test_state_does_not_leak_between_episodes():
    mutate = env_source(extra="""
        def __init__(self, max_turns=12, **kwargs):
            import math
            math.pi = 3
            global LEFT_BEHIND
            LEFT_BEHIND = 1
            __builtins__["len"] = lambda value: 0
    """)
    probe = env_source("""import math\nreturn f"{math.pi:.2f} {len('abc')} {'LEFT_BEHIND' in globals()}", {}""")

    async def body(pool):
        async with pool.open_episode(mutate) as episode:
            await episode.reset(seed=0)
        async with pool.open_episode(probe) as episode:
            return (await episode.reset(seed=0))[0], episode.cleanup_problem, pool.statistics()

    observation, problem, stats = run(body)
    assert observation == "3.14 3 False"
    assert problem == "" and stats.workers_replaced == 1  # the mutating episode's worker was retired


def test_episodes_run_concurrently_up_to_the_worker_count():
    slow = env_source(step_body='x = 0\nfor _ in range(3_000_000): x += 1\nreturn "ok", 0.0, True, False, {}')
    concurrent = 0
    peak = 0
    both = trio.Event()  # the first two episodes stay open until both are: no race against the machine's load

    async def one(pool):
        nonlocal concurrent, peak
        async with pool.open_episode(slow) as episode:
            concurrent += 1
            peak = max(peak, concurrent)
            if concurrent == 2:
                both.set()
            with trio.move_on_after(60):
                await both.wait()
            await episode.reset(seed=0)
            await episode.step("x")
            concurrent -= 1

    async def body(pool):
        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(one, pool)
        return pool.statistics()

    stats = run(body, workers=2, step_timeout_s=30.0)
    assert peak == 2 and stats.episodes_served == 6 and stats.episodes_failed == 0


def test_cancelling_a_caller_mid_call_does_not_leak_a_bad_worker():
    async def body(pool):
        with trio.move_on_after(0.3):
            async with pool.open_episode(env_source(step_body="while True: pass")) as episode:
                await episode.reset(seed=0)
                await episode.step("x")
        assert await play_guess(pool)  # the worker mid-call was killed, a fresh one serves this
        return pool.statistics()

    stats = run(body, step_timeout_s=30.0)  # the cancellation, never the step timeout, ends the call
    assert stats.workers_replaced == 1 and stats.episodes_failed == 0


def test_the_episode_timeout_bounds_a_whole_episode():
    source = env_source(step_body='x = 0\nfor _ in range(2_000_000): x += 1\nreturn "ok", 0.0, False, False, {}')

    async def body(pool):
        with pytest.raises(EpisodeFailed, match=r"^timeout: the episode took longer than"):
            async with pool.open_episode(source) as episode:
                await episode.reset(seed=0)
                while True:
                    await episode.step("x")

    run(body, episode_timeout_s=0.5)


def test_bad_pool_arguments_are_refused():
    async def body():
        async with open_sandbox_pool(isolation="docker"):
            pass

    with pytest.raises(ValueError, match=r"^isolation must be one of \['auto', 'bubblewrap', 'rlimits', 'rlimits-unconfined-reads', "
                                         r"'unshare', 'unshare-unconfined-reads'\], got 'docker'$"):
        trio.run(body)


def test_closing_the_pool_leaves_no_process_behind():
    pids = []

    async def body(pool):
        for _ in range(3):
            with pytest.raises(EpisodeFailed):
                async with pool.open_episode(env_source(step_body="while True: pass")) as episode:
                    pids.append(episode._worker.pid)
                    await episode.reset(seed=0)
                    await episode.step("x")
        with trio.fail_after(30):  # the background refills start their workers
            while any(slot.worker is None for slot in pool._slots):
                await trio.sleep(0.01)
        pids.extend(slot.worker.pid for slot in pool._slots if slot.worker is not None)

    run(body, workers=2, step_timeout_s=0.3)
    assert len(set(pids)) >= 4
    assert not any(_alive(pid) for pid in pids)


def test_workers_die_with_the_pool_process():
    script = textwrap.dedent("""
        import sys, trio
        from actors.sandbox import open_sandbox_pool
        async def main():
            async with open_sandbox_pool(workers=2) as pool:
                while any(s.worker is None for s in pool._slots):
                    await trio.sleep(0.01)
                print(" ".join(str(s.worker.pid) for s in pool._slots), flush=True)
                await trio.sleep(60)
        trio.run(main)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True,
                             stderr=subprocess.DEVNULL)
    try:
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        owner.stdout.close()
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False
