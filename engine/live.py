"""The live terminal view: a status line redrawn in place on a terminal, one summary line per step.

On a terminal the bottom line shows what the engine is waiting for (designs 2/3, plays 7/12, learner update)
and refreshes as results arrive; each finished step prints a permanent line. Off a terminal (CI, a log file),
only the permanent lines are printed.
"""

from __future__ import annotations

import sys
import time


class LiveView:
    def __init__(self, total_steps: int, stream=None, enabled: bool | None = None):
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if enabled is None else enabled
        self.total_steps = total_steps
        self.started = time.monotonic()
        self._status = ""

    def _elapsed(self) -> str:
        seconds = int(time.monotonic() - self.started)
        return f"{seconds // 60:02d}:{seconds % 60:02d}"

    def status(self, text: str) -> None:
        self._status = text
        if self.live:
            self.stream.write(f"\r\x1b[2K[{self._elapsed()}] {text}")
            self.stream.flush()

    def line(self, text: str) -> None:
        if self.live:
            self.stream.write("\r\x1b[2K")
        self.stream.write(f"[{self._elapsed()}] {text}\n")
        if self.live and self._status:
            self.stream.write(f"[{self._elapsed()}] {self._status}")
        self.stream.flush()

    def step_line(self, metrics: dict) -> None:
        m = metrics
        self.line(
            f"step {m['step'] + 1}/{self.total_steps}  v{m['policy_version']}  "
            + (f"designs {m['envs_valid']} valid of {m['envs_requested']}  " if m["envs_requested"] else "")
            + f"envs {m['active_envs']}  "
            f"win {m['win_rate_no_hint']:.2f} -> {m['win_rate_hint']:.2f} with hint  "
            f"regret {m['mean_regret']:+.2f}  learnable {m['learnable_share']:.2f}  "
            f"{m['tokens_per_s']:.0f} tok/s  loss {m['learner_loss']:+.4f}  stale {m['staleness']:.2f}  sandbox {m.get('sandbox', '?')}"
        )

    def close(self) -> None:
        if self.live:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
