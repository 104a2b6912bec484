"""Tasks out to rollout workers by credit, results back to whoever waits for them.

    results = await dispatcher.run_tasks(tasks)      # a list of DesignResult / PlayResult / TaskFailed, in order

Each worker announces `slots` (how many tasks it runs at once); the dispatcher never sends it more. A task a
worker reports as failed is retried on another send (up to `retries` times); the tasks of a worker that goes
silent or whose process dies are requeued. Workers can join at any time (`bin/spade-engine worker`).

Leases: a task sent to a worker is leased to that worker's identity (`WorkerState.in_flight`); `complete` takes
an answer only from the identity holding the lease, and hands any other to `Leases` (engine/peers/leases.py), which
tells late answers from rejected ones and bans an identity that keeps sending the latter. Sends never wait: a
worker whose queue is full (it does not read) or who is gone is dropped and its tasks requeued.

Deadlines: a lease lasts at most `deadline_s(task)` (the hub's: worker.lease_factor x the task's own time bound).
A task past it is taken back (a late answer is then no offence), counted against the worker (`timed_out_tasks`)
and sent again, the send counting as an attempt, so a task that hangs every worker fails after its retries instead
of holding the run; a worker that lets `max_timeouts` leases pass is dropped.

Reading: each heartbeat says how many tasks the worker has taken off its socket since its hello
(`Heartbeat.tasks_received`). A task still unread after `unread_heartbeats` of the worker's own heartbeats is taken
back and the worker dropped (`unread_workers`): a peer that heartbeats but does not read is shed within a few of its
own beats, a bound that stretches with the worker's pace on a busy machine instead of a wall clock tuned on a quiet
one. A worker dropped by mistake asks again (HelloAgain) at its next heartbeat.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

import msgspec
import trio

from engine.peers.leases import Leases
from engine.protocol.messages import DesignResult, DesignTask, PlayResult, PlayTask, TaskFailed
from engine.protocol.transport import MessageSocket

Task = DesignTask | PlayTask
Result = DesignResult | PlayResult | TaskFailed


class WorkerState(msgspec.Struct, kw_only=True):
    ident: bytes
    worker_id: str
    slots: int
    isolation: str
    backend: str
    policy_version: int
    last_seen: float
    in_flight: dict[str, Task] = msgspec.field(default_factory=dict)
    leased_at: dict[str, float] = msgspec.field(default_factory=dict)  # task id -> monotonic time of its send
    timeouts: int = 0  # leases this worker let pass their deadline
    sent: int = 0  # tasks sent to it since its hello
    send_seq: dict[str, int] = msgspec.field(default_factory=dict)  # task id -> its place in that count
    unread_beats: dict[str, int] = msgspec.field(default_factory=dict)  # task id -> heartbeats that did not count it read


class _Call:
    """One `run_tasks` call: woken once, when its last task is answered (not once a result: a wake-up is a trip
    through the scheduler, which costs as much as checking the result)."""
    __slots__ = ("remaining", "done")

    def __init__(self, count: int):
        self.remaining = count
        self.done = trio.Event()


class _Waiting:
    __slots__ = ("task", "call", "result", "attempts", "timed_out_on")

    def __init__(self, task: Task, call: _Call):
        self.task = task
        self.call = call
        self.result: Result | None = None  # set once it is answered (or failed for good)
        self.attempts = 0
        self.timed_out_on: set[bytes] = set()  # workers that let its lease pass: another one gets it first


class Dispatcher:
    def __init__(self, sock: MessageSocket, *, retries: int = 1, on_result: Callable[[Result], None] | None = None,
                 deadline_s: Callable[[Task], float] | None = None, max_timeouts: int = 3, unread_heartbeats: int = 5,
                 on_sent: Callable[[bytes], None] = lambda ident: None):
        self._sock = sock
        self._retries = retries
        self._deadline_s = deadline_s
        self._max_timeouts = max_timeouts
        self._unread_heartbeats = unread_heartbeats
        self._on_sent = on_sent  # each task sent: its worker owes a result (engine/peers/flood.py refund)
        self._pending: collections.deque[str] = collections.deque()
        self._waiting: dict[str, _Waiting] = {}
        self.workers: dict[bytes, WorkerState] = {}
        self._dispatching = self._again = False
        self._on_result = on_result
        self.requeued = 0
        self.leases = Leases()

    # ------------------------------------------------------------ callers
    async def run_tasks(self, tasks: list[Task]) -> list[Result]:
        call = _Call(len(tasks))
        waits = []
        for task in tasks:
            waiting = _Waiting(task, call)
            self._waiting[task.task_id] = waiting
            self._pending.append(task.task_id)
            waits.append(waiting)
        self._kick()
        if waits:
            await call.done.wait()
        return [w.result for w in waits]

    def outstanding(self) -> int:
        """Tasks given to `run_tasks` and not yet answered (queued or in flight)."""
        return len(self._waiting)

    def in_flight(self) -> int:
        return sum(len(w.in_flight) for w in self.workers.values())

    # ------------------------------------------------------------ worker events
    def add_worker(self, state: WorkerState) -> None:
        old = self.workers.pop(state.ident, None)
        if old is not None:
            self._requeue(old)
        self.workers[state.ident] = state
        self._kick()

    def drop_worker(self, ident: bytes) -> WorkerState | None:
        state = self.workers.pop(ident, None)
        if state is not None:
            self._requeue(state)
            self._kick()
        return state

    def seen(self, ident: bytes, policy_version: int | None = None) -> WorkerState | None:
        state = self.workers.get(ident)
        if state is not None:
            state.last_seen = time.monotonic()
            if policy_version is not None:
                state.policy_version = policy_version
        return state

    def heartbeat(self, ident: bytes, policy_version: int, tasks_received: int) -> WorkerState | None:
        """A worker's heartbeat: `seen`, then its reading checked. None when `ident` is no worker here, or no longer:
        dropped now for a task left unread over `unread_heartbeats` of its beats."""
        state = self.seen(ident, policy_version)
        if state is None or self._unread_heartbeats <= 0:
            return state
        for task_id, seq in state.send_seq.items():
            if seq < tasks_received:
                state.unread_beats.pop(task_id, None)
            elif task_id in state.in_flight:
                state.unread_beats[task_id] = state.unread_beats.get(task_id, 0) + 1
        state.send_seq = {t: seq for t, seq in state.send_seq.items() if seq >= tasks_received and t in state.in_flight}
        if any(beats >= self._unread_heartbeats for beats in state.unread_beats.values()):
            self.leases.counters["unread_workers"] += 1
            self.drop_worker(ident)
            return None
        return state

    def holds_lease(self, ident: bytes, task_id: str) -> bool:
        state = self.workers.get(ident)
        return state is not None and task_id in state.in_flight

    def banned(self, ident: bytes) -> bool:
        return self.leases.banned(ident)

    def complete(self, ident: bytes, result: Result) -> str:
        """Take `ident`'s answer if it holds the task's lease: "accepted", else `Leases.not_leased`'s verdict
        ("late", "rejected", or "ban": the identity is dropped and banned)."""
        state = self.workers.get(ident)
        if state is None or result.task_id not in state.in_flight:
            verdict = self.leases.not_leased(result.task_id, ident)
            if verdict == "ban":
                self.drop_worker(ident)
            return verdict
        del state.in_flight[result.task_id]
        state.leased_at.pop(result.task_id, None)
        state.send_seq.pop(result.task_id, None)  # an answer proves it was read
        state.unread_beats.pop(result.task_id, None)
        state.last_seen = time.monotonic()
        waiting = self._waiting.get(result.task_id)
        if waiting is None or waiting.result is not None:
            return "late"  # cannot happen while leases end on requeue; kept as a guard
        if isinstance(result, TaskFailed) and waiting.attempts <= self._retries:
            self._pending.append(result.task_id)
        else:
            self._finish(result.task_id, result)
        self._kick()
        return "accepted"

    def _requeue(self, state: WorkerState) -> None:
        for task_id in state.in_flight:
            self.leases.ended(task_id, state.ident)
            if task_id in self._waiting:
                self._waiting[task_id].attempts -= 1  # not the task's fault: this send does not count
                self._pending.appendleft(task_id)
                self.requeued += 1
        state.in_flight.clear()
        state.leased_at.clear()
        state.send_seq.clear()
        state.unread_beats.clear()

    def _kick(self) -> None:
        """Send what the credit allows, now: sends never wait (a full or gone peer is dropped), so there is no
        task to wake. Reentrant calls (a failed send drops a worker, which kicks) fold into the running loop."""
        if self._dispatching:
            self._again = True
            return
        self._dispatching = True
        try:
            self._again = True
            while self._again:
                self._again = False
                self._dispatch()
        finally:
            self._dispatching = False

    # ------------------------------------------------------------ the loop
    def _free_worker(self, avoid: set[bytes] = frozenset()) -> WorkerState | None:
        free = [w for w in self.workers.values() if len(w.in_flight) < w.slots]
        preferred = [w for w in free if w.ident not in avoid] or free
        return min(preferred, key=lambda w: len(w.in_flight) / w.slots) if preferred else None

    def _dispatch(self) -> None:
        while self._pending:
            waiting = self._waiting.get(self._pending[0])
            worker = self._free_worker(waiting.timed_out_on if waiting is not None else frozenset())
            if worker is None:
                break
            task_id = self._pending.popleft()
            if waiting is None:
                continue
            waiting.attempts += 1
            worker.in_flight[task_id] = waiting.task
            worker.leased_at[task_id] = time.monotonic()
            worker.send_seq[task_id] = worker.sent
            worker.sent += 1
            if self._sock.try_send_to(worker.ident, waiting.task):
                self._on_sent(worker.ident)
            else:
                self.drop_worker(worker.ident)  # gone, or not reading: the task goes back to the queue

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Kept for the callers' `nursery.start(dispatcher.run)`: the sends happen in `_kick`."""
        task_status.started()
        await trio.sleep_forever()

    async def watch_liveness(self, dead_after_s: float, on_dead: Callable[[WorkerState], None],
                             on_timeout: Callable[[WorkerState, str, bool], None] | None = None) -> None:
        """Drop silent workers (their tasks requeued) and take back leases past their deadline."""
        while True:
            await trio.sleep(min(dead_after_s / 4, 1.0))
            now = time.monotonic()
            for ident, state in list(self.workers.items()):
                if now - state.last_seen > dead_after_s:
                    self.drop_worker(ident)
                    on_dead(state)
                elif self._deadline_s is not None:
                    self.expire_leases(state, now, on_timeout)

    def expire_leases(self, state: WorkerState, now: float, on_timeout=None) -> None:
        """Take back `state`'s leases past their deadline; drop the worker at its `max_timeouts`-th."""
        late = [t for t, at in state.leased_at.items() if now - at > self._deadline_s(state.in_flight[t])]
        for task_id in late:
            del state.in_flight[task_id]
            del state.leased_at[task_id]
            state.unread_beats.pop(task_id, None)  # its place in the count stays: the worker may still read it
            self.leases.ended(task_id, state.ident)
            self.leases.counters["timed_out_tasks"] += 1
            state.timeouts += 1
            waiting = self._waiting.get(task_id)
            if waiting is not None and waiting.result is None:
                waiting.timed_out_on.add(state.ident)
                if waiting.attempts <= self._retries:
                    self._pending.append(task_id)
                else:  # it outlived every lease it was given: failed, so the run goes on
                    self._finish(task_id, TaskFailed(task_id=task_id, worker_id=state.worker_id,
                                                     reason=f"no answer within its lease deadline ({waiting.attempts} workers tried)"))
            dropped = self._max_timeouts > 0 and state.timeouts >= self._max_timeouts
            if on_timeout is not None:
                on_timeout(state, task_id, dropped)
            if dropped:
                self.leases.counters["timed_out_workers"] += 1
                self.drop_worker(state.ident)
                break
        if late:
            self._kick()

    def _finish(self, task_id: str, result: Result) -> None:
        waiting = self._waiting.pop(task_id)
        waiting.result = result
        waiting.call.remaining -= 1
        if not waiting.call.remaining:
            waiting.call.done.set()
        if self._on_result is not None:
            self._on_result(result)

    async def broadcast(self, message) -> None:
        for ident in list(self.workers):
            if not self._sock.try_send_to(ident, message):
                self.drop_worker(ident)  # it asks again (HelloAgain on its next heartbeat) and gets the news then
        await trio.lowlevel.checkpoint()
