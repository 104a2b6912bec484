"""Generation and training taking turns on the same GPUs (the time-shared placement, engine/protocol/placement.py):
the engine's side of the order.

    share = TimeShare(plan, send=worker_sock.try_send_to, connected=lambda: {ident: worker_id, ...}, timeout_s=..., say=print)
    share.joined(ident, worker_id)          # each worker hello: one that joins while the others sleep is put to sleep too
    await share.all_joined()                # at start: every planned worker is up (its vLLM sized its KV cache alone)
    await share.sleep(version)              # before a TrainBatch: Sleep to each planned worker, until each says Slept
    share.slept(ident)                      # a worker's Slept (taken only from a worker asked)
    await share.wake(version)               # once the learner has trained every batch sent: WakeUp to each

The order per update: the engine asks every planned worker to sleep and waits for their `Slept` (bounded by
`timeout_s`; one that does not answer is named, and the update goes on), then sends the batch; the learner
updates and publishes; the engine broadcasts the new version's `PolicyUpdate`, then `WakeUp`, and each worker wakes
its engine and loads that version before it generates again (actors/worker.py). At start: the workers start first,
each engine sizes its KV cache with the GPU to itself, they sleep, the learner loads, and they wake (engine/peers/hub.py).
Disabled (any other layout): every call is a no-op.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import trio

from engine.protocol.messages import Sleep, WakeUp
from engine.protocol.placement import Plan

RECHECK_S = 1.0  # how often a sleep round looks again for workers that left (they are not waited for)


class TimeShare:
    def __init__(self, plan: Plan | None, *, send: Callable[[bytes, object], bool], connected: Callable[[], dict[bytes, str]],
                 timeout_s: float, say: Callable[[str], None]):
        self.enabled = plan is not None and plan.time_shared
        self.worker_ids = {p.worker_id for p in plan.workers if p.sleeps} if self.enabled else set()
        self.send = send
        self.connected = connected
        self.timeout_s = timeout_s
        self.say = say
        self.asleep = False
        self._waiting: set[bytes] = set()
        self._changed = trio.Event()
        self._joined: set[str] = set()
        self._all_joined = trio.Event()
        if not self.worker_ids:
            self._all_joined.set()
        self.events: list[tuple[str, object]] = []  # ("sleep", version), ("slept", worker_id), ("wake", version), in order
        self.counters = {"rounds": 0, "unanswered": 0, "slowest_sleep_s": 0.0}

    def _planned(self) -> dict[bytes, str]:
        return {ident: wid for ident, wid in self.connected().items() if wid in self.worker_ids}

    def joined(self, ident: bytes, worker_id: str) -> None:
        if worker_id not in self.worker_ids:
            return
        self._joined.add(worker_id)
        if self._joined >= self.worker_ids:
            self._all_joined.set()
        if self.asleep:  # (re)joined while the learner updates: it must not hold the GPU
            self._waiting.add(ident)
            self.send(ident, Sleep(version=-1))

    async def all_joined(self) -> None:
        await self._all_joined.wait()

    async def sleep(self, version: int) -> None:
        """Every planned worker connected now sleeps, or `timeout_s` passes (the stragglers are named)."""
        if not self.enabled or self.asleep:
            return
        self.asleep = True
        self.counters["rounds"] += 1
        self.events.append(("sleep", version))
        started = time.monotonic()
        targets = self._planned()
        self._waiting = {ident for ident in targets if self.send(ident, Sleep(version=version))}
        with trio.move_on_after(self.timeout_s):
            while self._waiting & set(self._planned()):  # a worker that left frees its GPU by leaving
                self._changed = trio.Event()
                with trio.move_on_after(RECHECK_S):
                    await self._changed.wait()
        late = sorted(targets[i] for i in self._waiting & set(self._planned()))
        if late:
            self.counters["unanswered"] += len(late)
            self.say(f"warning: worker(s) {', '.join(late)} did not put their engine to sleep within {self.timeout_s:.0f} s; "
                     "the learner updates anyway and may run out of GPU memory (see their logs)")
        self.counters["slowest_sleep_s"] = max(self.counters["slowest_sleep_s"], round(time.monotonic() - started, 3))
        self._waiting.clear()

    def slept(self, ident: bytes, worker_id: str) -> bool:
        """A worker's Slept: True when it was asked (else it is ignored)."""
        if ident not in self._waiting:
            return False
        self._waiting.discard(ident)
        self.events.append(("slept", worker_id))
        self._changed.set()
        return True

    async def wake(self, version: int) -> None:
        """Every planned worker wakes (after the new version's PolicyUpdate, which each loads before generating)."""
        if not self.enabled or not self.asleep:
            return
        self.asleep = False
        self._waiting.clear()
        self.events.append(("wake", version))
        for ident in self._planned():
            self.send(ident, WakeUp(version=version))
        await trio.lowlevel.checkpoint()
