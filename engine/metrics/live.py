"""The live terminal view: one progress bar per phase on a terminal (rich), plain lines elsewhere.

    view = LiveView(total_steps)             # enabled=None: live on a terminal; False: plain lines (CI, log files)
    view.status("step 2: plays 7/12")        # what the engine waits for; the matching bar moves
    view.line("worker w0 joined ...")        # a permanent line (above the bars on a terminal)
    view.step_line(metrics_row)              # the permanent line of a finished step
    view.close()

On a terminal the bars are: steps, designs (this refresh's, done of sent), validation (valid designs of all designs so
far), plays (this step's), learner update (the policy version against the one the batches sent will reach), each
with its count, rate and elapsed time, under a line saying what the engine is doing. The engine's status texts
drive them: `... designs D/N`, `... plays D/N`, `...: waiting for policy vT (learner at vL)`; any
other status is shown as the line. Off a terminal only the permanent lines are printed, as before.
"""

from __future__ import annotations

import re
import sys
import time

from engine.metrics.phases import biggest_phases

_DESIGNS = re.compile(r"^(step \d+): designs (\d+)/(\d+)$")
_PLAYS = re.compile(r"^(step \d+): plays (\d+)/(\d+)$")
_LEARNER = re.compile(r"waiting for policy v(\d+) \(learner at v(\d+)\)")


def _fmt(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


class LiveView:
    def __init__(self, total_steps: int, stream=None, enabled: bool | None = None, minutes: float = 0.0):
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if enabled is None else enabled
        self.total_steps = total_steps
        self.minutes = minutes  # a wall-clock budget (run.minutes): the steps line says the time left, not a count
        self.started = time.monotonic()
        self._budget_from = self.started
        self._status = ""
        self._designs = [0, 0]  # valid, requested: over the run so far
        self._rich = _RichBars(self.stream, 0 if minutes else total_steps) if self.live else None

    def _elapsed(self) -> str:
        seconds = int(time.monotonic() - self.started)
        return f"{seconds // 60:02d}:{seconds % 60:02d}"

    def status(self, text: str) -> None:
        self._status = text
        if self._rich is not None:
            self._rich.status(text)

    def line(self, text: str) -> None:
        if self._rich is not None:
            self._rich.print(f"[{self._elapsed()}] {text}")
            return
        self.stream.write(f"[{self._elapsed()}] {text}\n")
        self.stream.flush()

    def budget_started(self) -> None:
        """The wall-clock budget (`minutes`) counts from now (the first step), not from the start-up."""
        self._budget_from = time.monotonic()

    def _of_total(self) -> str:
        if self.minutes:
            left = max(0.0, self.minutes - (time.monotonic() - self._budget_from) / 60)
            return f" ({left:.0f} of {self.minutes:g} min left)"
        return f"/{self.total_steps}"

    def step_line(self, metrics: dict) -> None:
        m = metrics
        self._designs[0] += m.get("envs_valid", 0)
        self._designs[1] += m.get("envs_requested", 0)
        reveal = m.get("formula_reveal_rate")
        self.line(
            f"step {m['step'] + 1}{self._of_total()}  v{m['policy_version']}  "
            + (f"designs {m['envs_valid']} valid of {m['envs_requested']}  " if m.get("envs_requested") else "")
            + f"envs {m.get('active_envs', 0)}  "
            f"win {m.get('win_rate_no_hint', 0.0):.2f} -> {m.get('win_rate_hint', 0.0):.2f} with hint  "
            f"regret {m.get('mean_regret', 0.0):+.2f}  learnable {m.get('learnable_share', 0.0):.2f}  "
            f"vendi/n {_fmt(m.get('vendi_envs_per_n'))}  "
            + (f"reveal {reveal:.2f}  " if reveal is not None else "")
            + f"{m.get('tokens_per_s', 0.0):.0f} tok/s  loss {m.get('learner_loss', 0.0):+.4f}  "
            f"stale {m.get('staleness', 0.0):.2f}  sandbox {m.get('sandbox', '?')}"
            + (f"  {m['time_step_s']:.0f} s: " + ", ".join(f"{phase} {seconds:.0f}" for phase, seconds in biggest_phases(m))
               + f", generating {m.get('generator_busy_share', 0.0):.0%}" if m.get("time_step_s") else "")
        )
        if self._rich is not None:
            self._rich.step_done(m["step"] + 1, *self._designs)

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None


class _RichBars:
    """The bars themselves (rich.progress inside rich.live, refreshed by hand: the engine is one Trio thread)."""

    def __init__(self, stream, total_steps: int):
        from rich.console import Console, Group
        from rich.live import Live
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        from rich.text import Text

        self.total_steps = total_steps
        self.console = Console(file=stream, force_terminal=True)
        self.progress = Progress(
            TextColumn("{task.description:<28}"), BarColumn(bar_width=30), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>10}"), TimeElapsedColumn(), console=self.console, auto_refresh=False,
        )
        self.text = Text("")
        add = self.progress.add_task
        self.bars = {
            "steps": add("steps", total=total_steps or None, rate=""),  # None (a time budget): no bar to fill
            "designs": add("designs", total=None, rate=""),
            "validation": add("validation (valid designs)", total=None, rate=""),
            "plays": add("plays", total=None, rate=""),
            "learner": add("learner update (versions)", total=None, rate=""),
        }
        self._since = {name: time.monotonic() for name in self.bars}
        self.live = Live(Group(self.text, self.progress), console=self.console, auto_refresh=False, transient=True)
        self.live.start()

    def _set(self, name: str, done: int, total: int, description: str | None = None, *, per_minute: bool = False,
             restart: bool = False, rate: str | None = None) -> None:
        if restart:
            self._since[name] = time.monotonic()
        seconds = time.monotonic() - self._since[name]
        if rate is None:
            rate = f"{done / seconds * (60 if per_minute else 1):.2f}/{'min' if per_minute else 's'}" if seconds > 0 and done else ""
        fields = {"description": description} if description else {}
        self.progress.update(self.bars[name], completed=done, total=max(total, 1), rate=rate, **fields)

    def status(self, text: str) -> None:
        if m := _DESIGNS.search(text):
            step, done, total = m.group(1), int(m.group(2)), int(m.group(3))
            self._set("designs", done, total, f"designs ({step})", restart=done == 0)
        elif m := _PLAYS.search(text):
            step, done, total = m.group(1), int(m.group(2)), int(m.group(3))
            self._set("plays", done, total, f"plays ({step})", restart=done == 0)
        elif m := _LEARNER.search(text):
            self._set("learner", int(m.group(2)), int(m.group(1)), per_minute=True)
        self.text.plain = text
        self.live.refresh()

    def step_done(self, steps: int, valid: int, requested: int) -> None:
        if self.total_steps:
            self._set("steps", steps, self.total_steps, per_minute=True)
        else:
            self.progress.update(self.bars["steps"], completed=steps)
        if requested:
            self._set("validation", valid, requested, rate=f"pass {valid / requested:.0%}")
        self.live.refresh()

    def print(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)
        self.live.refresh()

    def stop(self) -> None:
        self.live.stop()
