"""Hostile tool implementations in the tool-use setting: a tool that hangs, crashes the worker, leaks memory or
state, or returns a huge result is contained by the sandbox, and the validator rejects (or cuts) it."""

import pytest
import trio

from actors.sandbox import EpisodeFailed, open_sandbox_pool
from actors.settings import validate_environment
from engine.protocol.paths import TOOL_USE_SEEDS_DIR

BANKING = (TOOL_USE_SEEDS_DIR / "banking.py").read_text()
TARGET = '        return f"1 {currency} = 1.08 USD"'
CASES = {  # name: (tool body, failure kind of a direct call or None, the validator's failed check or None)
    "hang": ("        while True:\n            pass", "timeout", "within_limits"),
    "crash": ("        random._os._exit(3)", "crashed", "no_dunder_tricks"),
    "memory_leak": ("        hoard = []\n        while True:\n            hoard.append(' ' * 10**8)", ("limit", "timeout"), "within_limits"),  # timeout on a loaded machine
    "state_leak": ("        ToolUseBaseEnv.leaked = currency\n        return 'ok'", None, "clean_exit"),
    "huge_result": ("        return 'x' * 5_000_000", None, None),
    "recursion": ("        return self.tool_get_exchange_rate(currency)", "limit", "within_limits"),
}


def _source(body: str) -> str:
    assert TARGET in BANKING
    return ("import random\n" if "random." in body else "") + BANKING.replace(TARGET, body)


@pytest.fixture(scope="module")
def results():
    async def main():
        out = {}
        async with open_sandbox_pool(workers=2, step_timeout_s=2.0, memory_mb=512) as pool:
            for name, (body, _, _) in CASES.items():
                source = _source(body)
                try:
                    async with pool.open_episode(source, wait_for_cleanup=True) as episode:
                        await episode.reset(seed=1)
                        reply = await episode.call_tool("get_exchange_rate", {"currency": "EUR"}, timeout_s=1.5, max_chars=1000)
                        failure = None
                except EpisodeFailed as exc:
                    reply, failure = "", exc
                cleanup = episode.cleanup_problem
                verdict = await validate_environment(pool, source)
                async with pool.open_episode(BANKING) as episode:  # the pool still serves
                    await episode.reset(seed=1)
                    still = await episode.call_tool("get_balance", {"account": "savings"})
                out[name] = (reply, failure, cleanup, verdict, still)
        return out
    return trio.run(main)


@pytest.mark.parametrize("name", CASES)
def test_hostile_tool_is_contained_and_rejected(name, results):
    body, kind, check = CASES[name]
    reply, failure, cleanup, verdict, still = results[name]
    assert still.startswith("savings: $")
    if kind is None:
        assert failure is None
    else:
        assert failure is not None and failure.kind in (kind if isinstance(kind, tuple) else (kind,)), (failure, reply)
    if check is None:
        assert verdict.valid, verdict.reason
    else:
        assert not verdict.valid and verdict.reason.startswith(check), verdict.reason
    if name == "state_leak":
        assert "modified" in cleanup
    if name == "huge_result":
        assert len(reply) < 1100 and reply.endswith("[result cut at 1000 of 5000000 characters]")
