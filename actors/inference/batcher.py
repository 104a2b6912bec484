"""Batches concurrent generation requests from many actors into one backend call, and swaps weights between calls.

    batcher = Batcher(backend, max_batch=16, wait_s=0.05)
    await nursery.start(batcher.run)
    generation = await batcher.generate(request)      # from any actor task
    batcher.request_weights(version, path)            # applied before the next batch
    await batcher.hold(version, wait_s=60)            # until that version (or a newer one) is loaded
    seconds = await batcher.sleep()                   # time-shared GPUs: the backend frees its memory; requests wait
    await batcher.wake()                              # ... it takes it back and loads the pending version first

The backend runs in one worker thread owned by `run`; the request channel is bounded, so actors wait when the
backend falls behind. A natively concurrent backend (one with `generate_async`) gets each request as it comes.
A weight load runs alone (`_lock`): a request that comes while one runs waits for it and is generated on the new
version, and a batch of a thread-driven backend never overlaps a load.
"""

from __future__ import annotations

import contextlib
import time

import msgspec
import trio

from actors.inference.base import Generation, GenerationRequest, InferenceBackend


class BatcherStatistics(msgspec.Struct, frozen=True):
    batches: int
    requests: int
    tokens_generated: int
    busy_seconds: float  # wall time with at least one generation running
    policy_version: int
    sequence_seconds: float = 0.0  # the integral of the generations running: / busy_seconds is the mean concurrency


class GeneratorClock:
    """The generator's busy time (at least one generation running) and the integral of how many run, over time.

    clock.started(n) ... clock.finished(n)      # n generations begin / end (a thread batch: n at once)
    clock.totals()                              # (busy_seconds, sequence_seconds), the running interval included
    """

    def __init__(self, now=time.perf_counter):
        self._now = now
        self._running = 0
        self._since = now()
        self._busy = 0.0
        self._sequences = 0.0

    def _advance(self) -> None:
        now = self._now()
        if self._running:
            self._busy += now - self._since
            self._sequences += (now - self._since) * self._running
        self._since = now

    def started(self, n: int = 1) -> None:
        self._advance()
        self._running += n

    def finished(self, n: int = 1) -> None:
        self._advance()
        self._running -= n

    def totals(self) -> tuple[float, float]:
        self._advance()
        return self._busy, self._sequences


class _Pending:
    __slots__ = ("request", "done", "result")

    def __init__(self, request: GenerationRequest):
        self.request = request
        self.done = trio.Event()
        self.result: Generation | BaseException | None = None


class Batcher:
    def __init__(self, backend: InferenceBackend, *, max_batch: int, wait_s: float):
        self.backend = backend
        self.max_batch = max_batch
        self.wait_s = wait_s
        self._send, self._receive = trio.open_memory_channel[_Pending](max_batch * 4)
        self._weights: tuple[int, str] | None = None  # the newest version requested and not yet loading
        self._newest = backend.policy_version  # the newest version loaded, loading or pending
        self._requested = trio.Event()  # set, and replaced, whenever a newer version is requested
        self._lock = trio.Lock()  # held by a weight load, and by a thread-driven batch (generate must not overlap a load)
        self._awake = trio.Event()  # unset while the backend sleeps (time-shared GPUs): no load and no batch starts
        self._awake.set()
        self._batches = self._requests = self._tokens = 0
        self._clock = GeneratorClock()

    @property
    def policy_version(self) -> int:
        return self.backend.policy_version

    def request_weights(self, version: int, path: str) -> None:
        """Load `version` before the next generate call, unless a version at least as new is loaded or coming."""
        if version > self._newest:
            self._newest = version
            self._weights = (version, path)
            self._requested.set()
            self._requested = trio.Event()

    async def hold(self, version: int, *, wait_s: float) -> bool:
        """Until the backend holds `version` or a newer one. A version already requested is loaded now (not at the
        next request); one not requested yet (its PolicyUpdate on its way, or being fetched) is waited for, at most
        `wait_s` seconds. False when it did not come in time: the caller goes on with the version loaded."""
        if self.backend.policy_version >= version:
            return True
        with trio.move_on_after(wait_s):
            while self._newest < version:
                await self._requested.wait()
        await self._apply_weights()  # the pending version, or the end of a load already running
        return self.backend.policy_version >= version

    async def generate(self, request: GenerationRequest) -> Generation:
        pending = _Pending(request)
        await self._send.send(pending)
        await pending.done.wait()
        if isinstance(pending.result, BaseException):
            raise pending.result
        return pending.result

    def statistics(self) -> BatcherStatistics:
        busy, sequences = self._clock.totals()
        return BatcherStatistics(self._batches, self._requests, self._tokens, busy, self.backend.policy_version,
                                 sequence_seconds=sequences)

    async def _load_pending(self) -> None:
        """Load the requested version, if any; the caller holds `_lock`."""
        if self._weights is not None:
            version, path = self._weights
            self._weights = None
            await trio.to_thread.run_sync(self.backend.load_weights, path, version)

    async def _apply_weights(self) -> None:
        async with self._turn():
            await self._load_pending()

    @contextlib.asynccontextmanager
    async def _turn(self):
        """`_lock`, taken once the backend is awake (a sleep takes the lock too, so it waits for a batch or a load)."""
        while True:
            await self._awake.wait()
            await self._lock.acquire()
            if self._awake.is_set():
                break
            self._lock.release()  # it fell asleep meanwhile
        try:
            yield
        finally:
            self._lock.release()

    @property
    def asleep(self) -> bool:
        return not self._awake.is_set()

    async def sleep(self) -> float:
        """Free the backend's GPU memory for the learner's update (`backend.sleep`, after the batch or load that is
        running); until `wake`, no load and no batch starts. Seconds it took (0 when already asleep)."""
        if self.asleep:
            return 0.0
        self._awake = trio.Event()
        started = time.perf_counter()
        async with self._lock:
            await trio.to_thread.run_sync(self.backend.sleep)
        return time.perf_counter() - started

    async def wake(self) -> None:
        """Take the GPU memory back (`backend.wake_up`) and load the newest requested version before anything is
        generated again."""
        if not self.asleep:
            return
        async with self._lock:
            await trio.to_thread.run_sync(self.backend.wake_up)
            await self._load_pending()
        self._awake.set()

    async def _serve_one(self, pending: _Pending) -> None:
        # Through the lock: a request that comes while a load runs waits for it, so it is not generated on the old
        # version (the first requests of a step's plays used to, and were dropped as stale at run.max_staleness = 0).
        await self._apply_weights()
        self._clock.started()
        try:
            pending.result = await self.backend.generate_async(pending.request)
            self._tokens += len(pending.result.completion_ids)
        except Exception as exc:
            pending.result = exc
        finally:
            self._clock.finished()
        self._batches += 1
        self._requests += 1
        pending.done.set()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        if hasattr(self.backend, "generate_async"):  # natively concurrent: each request as it comes
            async with trio.open_nursery() as nursery:
                task_status.started()
                async for pending in self._receive:
                    nursery.start_soon(self._serve_one, pending)
            return
        task_status.started()
        while True:
            first = await self._receive.receive()
            batch = [first]
            with trio.move_on_after(self.wait_s):
                while len(batch) < self.max_batch:
                    batch.append(await self._receive.receive())
            while len(batch) < self.max_batch:  # take whatever else is already queued
                try:
                    batch.append(self._receive.receive_nowait())
                except trio.WouldBlock:
                    break
            async with self._turn():  # a load waits for this batch, and this batch for a load (`hold`) or a sleep
                await self._load_pending()
                self._clock.started(len(batch))
                try:
                    results = await trio.to_thread.run_sync(self.backend.generate, [p.request for p in batch])
                    if len(results) != len(batch):
                        raise RuntimeError(f"backend {self.backend.name} returned {len(results)} generations for {len(batch)} requests")
                except Exception as exc:  # a backend failure fails these requests, not the worker
                    results = [exc] * len(batch)
                finally:
                    self._clock.finished(len(batch))
            self._batches += 1
            self._requests += len(batch)
            for pending, result in zip(batch, results):
                pending.result = result
                if isinstance(result, Generation):
                    self._tokens += len(result.completion_ids)
                pending.done.set()
