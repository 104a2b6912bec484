"""Warnings a peer can cause, rate-limited: at most `per_interval` lines of each kind per `interval_s`, each cut to
`MAX_CHARS`; what was held back is summed up in one line when the next of its kind gets through.

    warnings = Warnings(view.line)
    warnings.warn("malformed worker message", f"ignored a malformed worker message from {short_id(ident)}: {exc}")
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

MAX_CHARS = 300


class Warnings:
    def __init__(self, emit: Callable[[str], None], *, per_interval: int = 5, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self._emit = emit
        self._per_interval = per_interval
        self._interval_s = interval_s
        self._clock = clock
        self._windows: dict[str, tuple[float, int, int]] = {}  # kind -> (window start, shown, held back)
        self.counts: collections.Counter[str] = collections.Counter()  # every warning, shown or not, by kind

    def warn(self, kind: str, text: str) -> bool:
        """Emit `warning: text` unless `kind` already had its share of this interval; True when emitted."""
        self.counts[kind] += 1
        now = self._clock()
        start, shown, held = self._windows.get(kind, (now, 0, 0))
        if now - start >= self._interval_s:
            if held:
                self._emit(f"warning: {held} more '{kind}' warnings were not shown in the last {now - start:.0f} s")
            start, shown, held = now, 0, 0
        if shown >= self._per_interval:
            self._windows[kind] = (start, shown, held + 1)
            return False
        self._windows[kind] = (start, shown + 1, held)
        line = text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + "..."
        self._emit(f"warning: {line}")
        return True
