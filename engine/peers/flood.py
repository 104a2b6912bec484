"""Each peer's message budget on the engine's worker socket: a peer that sends faster than any worker does is shed.

    budget = MessageBudget(per_s=200.0, burst=2000)
    if budget.spend(ident): ...               # False: past its budget now, a flood (the hub drops and bans it)
    budget.refund(ident)                      # the engine sent it something that asks for an answer

A token bucket per identity, on the engine's own clock: `burst` messages at once, refilled at `per_s`, and one
more for each message the engine asks for (`refund`: a task leased to the peer owes a result, a policy chunk
served owes the next request). So a worker's budget grows with what the engine asks of it, however fast a big
model's chunks travel, and beyond that its own traffic is a heartbeat every few seconds; a backlog the engine
reads late on a busy machine is a burst of what was sent over the same stretch, which the refill covers. A flooder
is past it within a second of its flood, whatever the load. What is remembered is bounded (`MAX_TRACKED`
identities, the least recent forgotten first), so a peer cycling through identities costs memory only up to that.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

MAX_TRACKED = 10_000


class MessageBudget:
    def __init__(self, per_s: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.per_s = per_s
        self.burst = burst
        self._clock = clock
        self._buckets: collections.OrderedDict[bytes, tuple[float, float]] = collections.OrderedDict()  # ident -> (tokens, at)

    def spend(self, ident: bytes) -> bool:
        """Count one message of `ident`: True while it is within its budget (always, when `per_s` is 0)."""
        if self.per_s <= 0:
            return True
        now = self._clock()
        tokens, at = self._buckets.pop(ident, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.per_s)
        within = tokens >= 1.0
        self._buckets[ident] = (tokens - 1.0 if within else tokens, now)
        while len(self._buckets) > MAX_TRACKED:
            self._buckets.popitem(last=False)
        return within

    def refund(self, ident: bytes) -> None:
        """One message more for `ident`, which the engine has just asked for (up to a full burst)."""
        if ident in self._buckets:
            tokens, at = self._buckets[ident]
            self._buckets[ident] = (min(float(self.burst), tokens + 1.0), at)
