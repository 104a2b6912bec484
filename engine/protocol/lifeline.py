"""The engine's children end when the engine does, even when it is killed (SIGKILL, the OOM killer) and gets no
chance to stop them: left running, an orphaned learner would meet the next `up --resume` as a second learner.

The engine puts its pid in the children's environment (`SPADE_ENGINE_PID`, see engine/peers/processes.py); the worker
and the learner (rank 0 under torchrun, whose parent is torchrun) run `cancel_when_engine_gone` beside their work,
which cancels it (so everything closes in order) once the engine is gone; `cancel_on_signal` does the same on
SIGTERM. An attached worker (`bin/spade-engine worker`) has no such pid and is not watched.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import trio

ENGINE_PID_ENV = "SPADE_ENGINE_PID"
# The per-run secret the engine gives its learner child, which says it in its LearnerHello (engine/peers/auth.py).
LEARNER_TOKEN_ENV = "SPADE_LEARNER_TOKEN"


def engine_pid() -> int | None:
    value = os.environ.get(ENGINE_PID_ENV, "")
    return int(value) if value.isdigit() else None


def is_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc: kill(pid, 0) is all there is
    return state not in ("Z", "X")


async def until_engine_gone(pid: int, interval_s: float = 1.0) -> None:
    while is_alive(pid):
        await trio.sleep(interval_s)


async def cancel_when_engine_gone(pid: int, scope: trio.CancelScope, who: str) -> None:
    await until_engine_gone(pid)
    print(f"{who}: the engine (pid {pid}) is gone; stopping", file=sys.stderr, flush=True)
    scope.cancel()


async def cancel_on_signal(scope: trio.CancelScope, signum: int = signal.SIGTERM, on_signal=lambda: None) -> None:
    """`signum` (SIGTERM from the engine or the user; SIGINT for the engine's Ctrl-C) cancels `scope`, so every
    resource closes in order; `on_signal` is called first. Through trio's signal receiver, which is woken however
    busy the process is, not through KeyboardInterrupt, which trio may hold back while the main task waits."""
    with trio.open_signal_receiver(signum) as signals:
        async for _ in signals:
            on_signal()
            scope.cancel()
            return
