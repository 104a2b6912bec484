"""Tasks out to rollout workers by credit, results back to whoever waits for them.

    results = await dispatcher.run_tasks(tasks)      # a list of DesignResult / PlayResult / TaskFailed, in order

Each worker announces `slots` (how many tasks it runs at once); the dispatcher never sends it more. A task a
worker reports as failed is retried on another send (up to `retries` times); the tasks of a worker that goes
silent or whose process dies are requeued. Workers can join at any time (`bin/spade-engine worker`).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

import msgspec
import trio

from engine.messages import DesignResult, DesignTask, PlayResult, PlayTask, TaskFailed
from engine.transport import MessageSocket, PeerGone

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


class _Waiting:
    __slots__ = ("task", "result", "done", "attempts")

    def __init__(self, task: Task):
        self.task = task
        self.result: Result | None = None
        self.done = trio.Event()
        self.attempts = 0


class Dispatcher:
    def __init__(self, sock: MessageSocket, *, retries: int = 1, on_result: Callable[[Result], None] | None = None):
        self._sock = sock
        self._retries = retries
        self._pending: collections.deque[str] = collections.deque()
        self._waiting: dict[str, _Waiting] = {}
        self.workers: dict[bytes, WorkerState] = {}
        self._kick_send, self._kick_receive = trio.open_memory_channel[None](1)
        self._on_result = on_result
        self.requeued = 0

    # ------------------------------------------------------------ callers
    async def run_tasks(self, tasks: list[Task]) -> list[Result]:
        waits = []
        for task in tasks:
            waiting = _Waiting(task)
            self._waiting[task.task_id] = waiting
            self._pending.append(task.task_id)
            waits.append(waiting)
        self._kick()
        for waiting in waits:
            await waiting.done.wait()
        return [w.result for w in waits]

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

    def complete(self, ident: bytes, result: Result) -> None:
        state = self.workers.get(ident)
        if state is not None:
            state.in_flight.pop(result.task_id, None)
            state.last_seen = time.monotonic()
        waiting = self._waiting.get(result.task_id)
        if waiting is None or waiting.done.is_set():
            return  # a late answer for a task that was requeued and already answered elsewhere
        if isinstance(result, TaskFailed) and waiting.attempts <= self._retries:
            self._pending.append(result.task_id)
        else:
            waiting.result = result
            del self._waiting[result.task_id]
            waiting.done.set()
            if self._on_result is not None:
                self._on_result(result)
        self._kick()

    def _requeue(self, state: WorkerState) -> None:
        for task_id in state.in_flight:
            if task_id in self._waiting:
                self._waiting[task_id].attempts -= 1  # not the task's fault: this send does not count
                self._pending.appendleft(task_id)
                self.requeued += 1
        state.in_flight.clear()

    def _kick(self) -> None:
        try:
            self._kick_send.send_nowait(None)
        except trio.WouldBlock:
            pass  # a wake-up is already pending

    # ------------------------------------------------------------ the loop
    def _free_worker(self) -> WorkerState | None:
        free = [w for w in self.workers.values() if len(w.in_flight) < w.slots]
        return min(free, key=lambda w: len(w.in_flight) / w.slots) if free else None

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._kick_receive.receive()
            while self._pending:
                worker = self._free_worker()
                if worker is None:
                    break
                task_id = self._pending.popleft()
                waiting = self._waiting.get(task_id)
                if waiting is None:
                    continue
                waiting.attempts += 1
                worker.in_flight[task_id] = waiting.task
                try:
                    await self._sock.send_to(worker.ident, waiting.task)
                except PeerGone:
                    self.drop_worker(worker.ident)

    async def watch_liveness(self, dead_after_s: float, on_dead: Callable[[WorkerState], None]) -> None:
        while True:
            await trio.sleep(min(dead_after_s / 4, 5.0))
            now = time.monotonic()
            for ident, state in list(self.workers.items()):
                if now - state.last_seen > dead_after_s:
                    self.drop_worker(ident)
                    on_dead(state)

    async def broadcast(self, message) -> None:
        for ident in list(self.workers):
            try:
                await self._sock.send_to(ident, message)
            except PeerGone:
                self.drop_worker(ident)
