"""A pool of long-lived sandbox workers that play untrusted environments, driven by trio.

    async with open_sandbox_pool(workers=2) as pool:
        async with pool.open_episode(source, max_turns=25) as episode:
            observation, info = await episode.reset(seed=0)
            result = await episode.step("\\boxed{3}")

Each worker is a `worker.py` interpreter started at the strongest isolation level this machine allows
(`isolation.py`), in its own session so that a kill reaches everything it started. An episode executes its
source in a fresh module inside a warm worker. Anything the environment does wrong raises `EpisodeFailed` and
ends that episode only: a worker that timed out, crashed, broke the protocol, hit a limit, changed the
interpreter's shared state or served `episodes_per_worker` episodes is killed and replaced in the background.
"""

import logging
import os
import tempfile
import warnings
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
import msgspec
import trio

from actors.sandbox import isolation, protocol
from actors.sandbox.episode import Episode, StepResult, play_clock_failure
from actors.sandbox.errors import EpisodeFailed, IsolationWarning, SandboxUnavailable
from actors.sandbox.isolation import (
    ALLOWED_MODULES, REQUESTS, STRONGEST, UNCONFINED_READS, IsolationLevel, Wrapping, find_interpreter, resolve_level,
    worker_source,
)
from actors.sandbox.process import SCRATCH_PREFIX, WorkerGone, WorkerProcess
from actors.sandbox.settings import SandboxSettings

__all__ = [
    "EpisodeFailed", "Episode", "IsolationLevel", "IsolationWarning", "PoolStatistics", "SandboxPool",
    "SandboxSettings", "SandboxUnavailable", "StepResult", "open_sandbox_pool",
]

START_TIMEOUT_S = 20.0
END_TIMEOUT_S = 5.0
FILE_SIZE_MB = 16
OPEN_FILES = 64
logger = logging.getLogger(__name__)


class PoolStatistics(msgspec.Struct, frozen=True, kw_only=True):
    isolation: str
    isolation_detail: str = ""  # which bwrap, Landlock and seccomp filter are in force
    workers: int
    episodes_served: int
    episodes_failed: int
    failures_by_kind: dict[str, int]
    workers_started: int
    workers_replaced: int


class _Slot:
    """A place for one worker; the idle channel holds the slots free for an episode."""

    def __init__(self) -> None:
        self.worker: WorkerProcess | None = None


class SandboxPool:
    """Use `open_sandbox_pool`; this object is only valid inside it."""

    def __init__(self, config: SandboxSettings, nursery: trio.Nursery) -> None:
        self.config = config
        self._requested = config.isolation
        self._nursery = nursery
        self._idle_send, self._idle_receive = trio.open_memory_channel[_Slot](config.workers)
        self._slots = [_Slot() for _ in range(config.workers)]
        self._command: list[str] = []
        self._level: IsolationLevel | None = None
        self._detail = ""
        self._wrapped = False
        self._scratch = False
        self._served = 0
        self._failures: Counter[str] = Counter()
        self._started = 0
        self._replaced = 0
        self._closed = False

    @property
    def isolation(self) -> IsolationLevel:
        assert self._level is not None
        return self._level

    @property
    def isolation_detail(self) -> str:
        """How the level is made here: which bwrap, whether Landlock and which seccomp filter are in force."""
        return self._detail

    def statistics(self) -> PoolStatistics:
        return PoolStatistics(
            isolation=str(self.isolation), isolation_detail=self._detail, workers=self.config.workers,
            episodes_served=self._served,
            episodes_failed=sum(self._failures.values()), failures_by_kind=dict(self._failures),
            workers_started=self._started, workers_replaced=self._replaced,
        )

    # ------------------------------------------------------------------ workers
    def _script_args(self, wrapping: Wrapping, landlock: bool = False) -> list[str]:
        config = protocol.WorkerConfig(
            memory_mb=self.config.memory_mb, cpu_seconds=self.config.cpu_seconds, file_size_mb=FILE_SIZE_MB,
            open_files=OPEN_FILES, max_output_bytes=self.config.max_output_bytes,
            allowed_modules=list(ALLOWED_MODULES), seccomp=wrapping.deny_list, die_with_parent=True,
            parent_pid=os.getpid() if wrapping.watches_parent else None,
            guard_writes=wrapping.guards_host_files, landlock=landlock,
        )
        return ["-c", worker_source(), protocol.encode_worker_config(config)]

    def _attempts(self, wrapping: Wrapping, python: str) -> list[list[tuple[list[str], bool]]]:
        """The (command, landlock) pairs to try for one wrapping, best first, in groups. Where the wrapping leaves
        the host's files visible, each command runs with Landlock where the kernel has it, and without only on an
        explicit `...-unconfined-reads` request (tried only if Landlock failed, or on a kernel without it)."""
        if not wrapping.guards_host_files:
            return [[(command, False)] for command in wrapping.commands(python, self._script_args(wrapping))]
        tries = []
        if isolation.kernel_landlock_abi():
            tries.append([(command, True) for command in wrapping.commands(python, self._script_args(wrapping, landlock=True))])
        if self._requested in UNCONFINED_READS:
            tries.append([(command, False) for command in wrapping.commands(python, self._script_args(wrapping, landlock=False))])
        return [list(group) for group in zip(*tries)]

    def _reads_refused(self, wrapping: Wrapping) -> str:
        """Why a fallback wrapping is not used without Landlock, and the opt-in that would use it anyway."""
        abi = isolation.kernel_landlock_abi()
        why = "Landlock could not be installed" if abi else "this kernel has no Landlock"
        return (f"{wrapping.name}: not used: {why}, so model-written code could read the host's files there; "
                f"install bubblewrap (or allow unprivileged user namespaces), or set sandbox.isolation = "
                f"\"{wrapping.name}-unconfined-reads\" to run there anyway")

    def _describe(self, wrapping: Wrapping, command: list[str], landlock: bool, ready: protocol.Ready) -> str:
        deny_list = "seccomp deny-list" if ready.seccomp else f"no seccomp deny-list ({ready.seccomp_detail})"
        if not wrapping.guards_host_files:  # bubblewrap: which bwrap is the whole story
            return f"{isolation.describe_bwrap(command[0])}; {deny_list}"
        where = os.path.join(tempfile.gettempdir(), SCRATCH_PREFIX + "*")
        if landlock:
            files = (f"Landlock ABI {isolation.kernel_landlock_abi()}: reads limited to the system's and the "
                     f"interpreter's files, writes to the worker's scratch directory {where}; seccomp refuses "
                     f"chmod, chown, mounts, ptrace")
        else:
            files = (f"no Landlock (kernel ABI {isolation.kernel_landlock_abi()}): host files stay readable, "
                     f"seccomp refuses every file write, the scratch directory's too")
        return f"{wrapping.contains}; {files}; {deny_list}"

    async def _spawn(self, command: list[str], wrapped: bool, scratch: bool = False) -> WorkerProcess:
        worker = WorkerProcess(command, self.config.max_output_bytes + 4096, wrapped, scratch)
        try:
            with trio.fail_after(START_TIMEOUT_S):
                ready = await worker.receive()
            if not isinstance(ready, protocol.Ready):
                detail = ready.detail if isinstance(ready, protocol.Failed) else type(ready).__name__
                raise SandboxUnavailable(f"the worker did not start: {detail}")
        except WorkerGone as gone:
            await worker.aclose()
            raise SandboxUnavailable(f"the worker did not start: {gone.failure.detail}") from None
        except BaseException:
            await worker.aclose()
            raise
        worker.ready = ready
        self._started += 1
        return worker

    def _start_with(self, wrapping: Wrapping, command: list[str], landlock: bool, worker: WorkerProcess,
                    errors: list[str]) -> None:
        """Keep the first worker that started: its command, level and detail; say which, warn below the best."""
        self._command, self._wrapped, self._scratch = command, wrapping.wrapped, wrapping.guards_host_files
        self._level = resolve_level(wrapping, worker.ready.seccomp, landlock)
        self._detail = self._describe(wrapping, command, landlock, worker.ready)
        self._slots[0].worker = worker
        logger.info("sandbox isolation %s: %s%s", self._level, self._detail,
                    f" (not used: {'; '.join(errors)})" if errors else "")
        if self._level != STRONGEST:
            reasons = "; ".join(errors + ([f"seccomp: {worker.ready.seccomp_detail}"]
                                          if wrapping.deny_list and not worker.ready.seccomp else []))
            open_to = "; ".join(self._level.uncontained) or "nothing"
            warnings.warn(IsolationWarning(
                f"SANDBOX ISOLATION IS WEAKER THAN bubblewrap+seccomp: running at {self._level!s} "
                f"(requested {self._requested!r}; not contained: {open_to}). {reasons or 'forced by the caller.'}"),
                stacklevel=6)

    async def _choose_level(self) -> None:
        """Start the first worker at the best level that works; it becomes slot 0's worker."""
        python = find_interpreter()
        errors: list[str] = []
        for wrapping in REQUESTS[self._requested]:
            landlock_failed = False
            for group in self._attempts(wrapping, python):
                for command, landlock in group:
                    try:
                        worker = await self._spawn(command, wrapped=wrapping.wrapped, scratch=wrapping.guards_host_files)
                    except (SandboxUnavailable, OSError, trio.TooSlowError) as exc:
                        errors.append(f"{wrapping.name}{'+landlock' if landlock else ''}: {exc}")
                        if "Landlock could not be installed" in str(exc):
                            landlock_failed = True
                            continue
                        break  # the same command without Landlock would fail the same way
                    self._start_with(wrapping, command, landlock, worker, errors)
                    return
            if not wrapping.commands(python, []):
                errors.append(f"{wrapping.name}: not installed")
            elif wrapping.guards_host_files and self._requested not in UNCONFINED_READS and (
                    landlock_failed or not isolation.kernel_landlock_abi()):
                errors.append(self._reads_refused(wrapping))
        raise SandboxUnavailable(f"no sandbox worker could be started ({'; '.join(errors)})")

    async def _start_worker(self) -> WorkerProcess:
        return await self._spawn(self._command, self._wrapped, self._scratch)

    async def _refill(self, slot: _Slot) -> None:
        try:
            worker = await self._start_worker()
            if self._closed:  # the pool closed while this one started
                await worker.aclose()
                return
            slot.worker = worker
        except (SandboxUnavailable, OSError, trio.TooSlowError):
            slot.worker = None  # the next episode on this slot retries and reports the error
        finally:
            self._idle_send.send_nowait(slot)

    async def _open(self) -> None:
        await self._choose_level()
        self._idle_send.send_nowait(self._slots[0])
        for slot in self._slots[1:]:
            self._nursery.start_soon(self._refill, slot)  # the first episodes need not wait for all of them

    async def _aclose(self) -> None:
        self._closed = True
        for slot in self._slots:
            if slot.worker is not None:
                await slot.worker.aclose()
                slot.worker = None

    # ------------------------------------------------------------------ episodes
    @asynccontextmanager
    async def open_episode(self, source: str, *, max_turns: int | None = None, fresh_worker: bool = False,
                           wait_for_cleanup: bool = False) -> AsyncIterator[Episode]:
        """Load `source` in a warm worker (a never-used one if `fresh_worker`) and instantiate its Env class.

        Waits while all workers are busy. Raises EpisodeFailed if the source does not load. On exit the worker
        cleans up behind the episode while the caller moves on; with `wait_for_cleanup` the exit waits for
        that and sets `episode.cleanup_problem` to whatever the episode left behind ("" if nothing).
        The whole play inside, the caller's waits for the model included, lasts at most `play_timeout_s` from here
        (a stuck play): then whatever it awaits is cancelled and EpisodeFailed("timeout", "the play took longer
        ...") comes out of the `async with`.
        """
        if self._closed:
            raise trio.ClosedResourceError("the sandbox pool is closed")
        slot = await self._idle_receive.receive()
        episode: Episode | None = None
        try:
            with trio.CancelScope(deadline=trio.current_time() + self.config.play_timeout_s) as play_clock:
                worker = await self._ready_worker(slot, fresh_worker)
                self._served += 1
                episode = Episode(self, worker, max_turns)
                sent = False
                if worker.ending:  # the Load goes out behind the End: the worker's clean-up and this overlap
                    sent = not await self._send_load_behind_end(worker, source)
                    if not sent:
                        await self._retire(slot)  # the last episode left something behind: a new worker for this one
                        worker = slot.worker = await self._start_worker()
                        episode = Episode(self, worker, max_turns)
                worker.episodes += 1
                await episode._load(source, sent=sent)
                yield episode
            if play_clock.cancelled_caught:
                failure = play_clock_failure(self.config.play_timeout_s)
                if episode is not None:
                    episode._fail(failure)
                raise failure
        finally:
            with trio.CancelScope(shield=True):
                await self._release(slot, episode, wait_for_cleanup)

    async def _ready_worker(self, slot: _Slot, fresh: bool) -> WorkerProcess:
        """The slot's worker (maybe still cleaning up behind its last episode), or a new one."""
        worker = slot.worker
        if worker is not None and (fresh and worker.episodes or not worker.trusted):
            await self._retire(slot)
        if slot.worker is None:
            slot.worker = await self._start_worker()
        return slot.worker

    async def _send_load_behind_end(self, worker: WorkerProcess, source: str) -> str:
        """Send the Load, then read the End reply; what the last episode left behind, "" if nothing."""
        worker.trusted = False  # a cancellation in the middle of the frame leaves the pipe unusable
        try:
            await worker.send(protocol.Load(source=source))
        except WorkerGone as gone:
            return f"the worker died after the episode: {gone.failure.detail}"
        return await self._wait_for_cleanup(worker)

    async def _wait_for_cleanup(self, worker: WorkerProcess) -> str:
        """Read the End reply; what the last episode left behind ("" if nothing: the worker may serve again)."""
        worker.ending = False
        worker.trusted = False  # until the reply is in: a cancellation meanwhile leaves it unusable
        try:
            with trio.move_on_after(min(END_TIMEOUT_S, self.config.step_timeout_s)):
                ended = await worker.receive()
                problem = ended.reason if isinstance(ended, protocol.Ended) else "the clean-up failed"
                worker.trusted = not problem
                return problem
            return "the clean-up timed out"
        except WorkerGone as gone:
            return f"the clean-up failed: {gone.failure.detail}"

    async def _retire(self, slot: _Slot) -> None:
        if slot.worker is not None:
            await slot.worker.aclose()
            slot.worker = None
            self._replaced += 1

    async def _release(self, slot: _Slot, episode: Episode | None, wait: bool) -> None:
        worker = slot.worker
        if episode is not None:
            episode.closed = True
            if episode.failure is not None:
                self._failures[episode.failure.kind] += 1
        if worker is not None and worker.episodes >= self.config.episodes_per_worker:
            worker.trusted = False  # served its share: replace it now, in the background
        if worker is not None and worker.trusted and not self._closed:
            try:
                await worker.send(protocol.End())
                worker.ending = True
            except WorkerGone:
                worker.trusted = False
        if worker is not None and worker.ending and wait:
            problem = await self._wait_for_cleanup(worker)
            if episode is not None:
                episode.cleanup_problem = problem
        if worker is not None and worker.trusted and not self._closed:
            self._idle_send.send_nowait(slot)  # the next episode checks the End reply before using it
            return
        await self._retire(slot)
        if self._closed:
            self._idle_send.send_nowait(slot)
        else:
            self._nursery.start_soon(self._refill, slot)


@asynccontextmanager
async def open_sandbox_pool(settings: SandboxSettings | None = None, **overrides) -> AsyncIterator[SandboxPool]:
    """Start `settings.workers` sandbox workers at the strongest isolation available (or the one requested).

    `settings`: a SandboxSettings (SandboxSettings.from_config(config.sandbox) in a run); `overrides` replace
    its fields, or the defaults' without one (open_sandbox_pool(workers=1, isolation="rlimits")).
    isolation: "auto" (bubblewrap, else unshare, else rlimits, with an IsolationWarning below
    bubblewrap+seccomp) or one of "bubblewrap", "unshare", "rlimits" (SandboxUnavailable if it cannot start); the
    fallback levels run only with Landlock, unless asked as "unshare-unconfined-reads" or "rlimits-unconfined-reads".
    """
    config = msgspec.structs.replace(settings, **overrides) if settings is not None else SandboxSettings(**overrides)
    try:
        async with trio.open_nursery() as nursery:
            pool = SandboxPool(config, nursery)
            try:
                await pool._open()
                yield pool
            finally:
                nursery.cancel_scope.cancel()
                with trio.CancelScope(shield=True):
                    await pool._aclose()
    except BaseExceptionGroup as group:
        # The background tasks (worker refills) never raise, so a lone exception is the caller's own or the
        # start-up's: hand it over as itself rather than wrapped in a group.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from group.exceptions[0].__cause__
        raise
