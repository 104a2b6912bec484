"""Who may answer a task: only the worker it is leased to, for that lease (engine/peers/dispatch.py holds the leases).

A result (or TaskFailed) that comes from another identity, or for a task not leased to the sender, is rejected
and counted; an identity with `REJECTS_BEFORE_BAN` rejected results is dropped from the rotation and banned for
the rest of the run (every later message of it is ignored and counted). A *late* answer, for a lease that ended
(the task was requeued when the worker went silent, or the worker was dropped and came back), is dropped without
counting against the worker. What is remembered is bounded, so a peer cycling through identities costs memory
only up to `MAX_TRACKED` entries.
"""

from __future__ import annotations

import collections

REJECTS_BEFORE_BAN = 5
MAX_TRACKED = 10_000  # identities with rejects, banned identities
MAX_PAST_LEASES = 100_000


def _remember(table: collections.OrderedDict, key, value, limit: int) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > limit:
        table.popitem(last=False)


class Leases:
    def __init__(self, rejects_before_ban: int = REJECTS_BEFORE_BAN):
        self.rejects_before_ban = rejects_before_ban
        self._past: collections.OrderedDict[tuple[str, bytes], None] = collections.OrderedDict()
        self._rejects: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self._banned: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self.counters: collections.Counter[str] = collections.Counter()

    def ended(self, task_id: str, ident: bytes) -> None:
        """`ident`'s lease on `task_id` ended without an answer (requeued): a late answer is no offence."""
        _remember(self._past, (task_id, ident), None, MAX_PAST_LEASES)

    def not_leased(self, task_id: str, ident: bytes) -> str:
        """An answer for a task that is not leased to `ident`: "late", "rejected", or "ban" (drop and ban it now)."""
        if self._past.pop((task_id, ident), 0) is None:
            self.counters["late_results"] += 1
            return "late"
        self.counters["rejected_results"] += 1
        count = self._rejects.get(ident, 0) + 1
        _remember(self._rejects, ident, count, MAX_TRACKED)
        if count >= self.rejects_before_ban:
            _remember(self._banned, ident, None, MAX_TRACKED)
            self.counters["banned_workers"] += 1
            return "ban"
        return "rejected"

    def ban(self, ident: bytes, counter: str) -> None:
        """Ban `ident` for the rest of the run for another offence than rejected results, counted as `counter`."""
        if ident not in self._banned:
            self.counters[counter] += 1
        _remember(self._banned, ident, None, MAX_TRACKED)

    def banned(self, ident: bytes) -> bool:
        """Whether `ident` is banned; each message of a banned identity is counted as ignored."""
        if ident in self._banned:
            self.counters["banned_messages"] += 1
            return True
        return False
