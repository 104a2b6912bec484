"""One sandbox worker process as the pool sees it: spawning, frames over its pipes, death and clean-up.

Popen runs in the trio thread itself, not through trio.open_process (which forks from a cached helper thread):
PR_SET_PDEATHSIG, behind bwrap's --die-with-parent and the worker's own, fires when the forking thread exits.
The pipes are raw non-blocking fds read and written directly, since this is the hot path of every step.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time

import msgspec
import trio

from actors.sandbox import protocol
from actors.sandbox.errors import EpisodeFailed

SPIN_NS = 40_000  # how long to poll for the reply to a cheap call before sleeping on epoll
SPAWN_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
SCRATCH_PREFIX = "spade-sandbox-"


class WorkerGone(Exception):
    """The worker cannot be trusted any more; carries the EpisodeFailed to raise."""

    def __init__(self, failure: EpisodeFailed) -> None:
        super().__init__(failure.kind)
        self.failure = failure


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class WorkerProcess:
    """One worker: its process, the two pipes, the frame buffer and, with `scratch`, its scratch directory
    (a fresh private temporary folder, the worker's current directory, removed with the worker)."""

    def __init__(self, command: list[str], max_frame: int, wrapped: bool, scratch: bool = False) -> None:
        self.scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX) if scratch else None
        child_stdin, self._stdin_fd = os.pipe2(os.O_CLOEXEC)
        self._stdout_fd, child_stdout = os.pipe2(os.O_CLOEXEC)
        self._stderr_fd, child_stderr = os.pipe2(os.O_CLOEXEC)
        try:
            self._popen = subprocess.Popen(
                command, stdin=child_stdin, stdout=child_stdout, stderr=child_stderr, cwd=self.scratch or "/",
                env=SPAWN_ENV, start_new_session=True, close_fds=True,
            )
        except BaseException:
            for fd in (self._stdin_fd, self._stdout_fd, self._stderr_fd):
                os.close(fd)
            if self.scratch:
                shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        finally:
            for fd in (child_stdin, child_stdout, child_stderr):
                os.close(fd)
        for fd in (self._stdin_fd, self._stdout_fd, self._stderr_fd):
            os.set_blocking(fd, False)
        self.pid = self._popen.pid
        try:
            self._pidfd: int | None = os.pidfd_open(self.pid)
        except OSError:  # kernels before 5.3: poll instead
            self._pidfd = None
        self._buffer = bytearray()
        self._max_frame = max_frame
        self._wrapped = wrapped  # bwrap/unshare report a child's death by signal N as exit status 128 + N
        self._closed = False
        self.episodes = 0
        self.trusted = True
        self.ending = False  # an End was sent whose reply has not been read yet
        self._unsent: memoryview | None = None
        self.ready: protocol.Ready | None = None

    # A call is `start_request`, then `reply_nowait`, and only if that comes back empty `finish_request`: a
    # cheap call's reply arrives within tens of microseconds, and polling for it without yielding saves the
    # epoll registration, the wake-up and a cancel scope, which cost more than the call in a small VM.
    def start_request(self, message: protocol.Request) -> None:
        """Write as much of the request as the pipe takes now; `finish_request` writes the rest."""
        view = memoryview(protocol.encode_frame(message))
        try:
            written = os.write(self._stdin_fd, view)
        except OSError:  # full or broken: finish_request tells which
            written = 0
        self._unsent = view[written:] if written < len(view) else None

    def reply_nowait(self, spin_ns: int) -> protocol.Reply | None:
        """The reply, if the request is all written and the reply arrives within `spin_ns`; else None."""
        if self._unsent is not None:
            return None
        spin_until = time.perf_counter_ns() + spin_ns
        while True:
            reply = self._frame()
            if reply is not None:
                return reply
            try:
                data = os.read(self._stdout_fd, 1 << 16)
            except BlockingIOError:
                if time.perf_counter_ns() < spin_until:
                    continue
                return None
            if not data:
                return None  # receive() reports the death
            self._buffer += data

    async def finish_request(self) -> protocol.Reply:
        if self._unsent is not None:
            view, self._unsent = self._unsent, None
            await self._write(view)
        return await self.receive()

    async def send(self, message: protocol.Request) -> None:
        await self._write(memoryview(protocol.encode_frame(message)))

    async def _write(self, view: memoryview) -> None:
        while view:
            try:
                view = view[os.write(self._stdin_fd, view):]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self._stdin_fd)
            except OSError:
                raise WorkerGone(await self._death()) from None

    async def receive(self) -> protocol.Reply:
        while (reply := self._frame()) is None:
            await trio.lowlevel.wait_readable(self._stdout_fd)
            try:
                data = os.read(self._stdout_fd, 1 << 16)
            except BlockingIOError:
                continue
            if not data:
                raise WorkerGone(await self._death())
            self._buffer += data
        return reply

    def _frame(self) -> protocol.Reply | None:
        """The next complete reply in the buffer, if there is one."""
        buffer = self._buffer
        if len(buffer) < 4:
            return None
        size = int.from_bytes(buffer[:4], "big")
        if size > self._max_frame:
            self.trusted = False
            raise WorkerGone(EpisodeFailed("limit", f"reply of {size} bytes exceeds max_output_bytes"))
        if len(buffer) < 4 + size:
            return None
        frame = bytes(buffer[4:4 + size])
        del buffer[:4 + size]
        try:
            return protocol.reply_decoder.decode(frame)
        except msgspec.DecodeError as exc:
            self.trusted = False
            raise WorkerGone(EpisodeFailed("protocol", f"undecodable reply from the worker: {exc}")) from exc

    async def _death(self) -> EpisodeFailed:
        """Why the worker went away (it closed its pipe, so it is exiting or gone)."""
        self.trusted = False
        with trio.move_on_after(1.0):
            await self.wait()
        code = self._popen.returncode
        if code is None:
            self.kill()
            return EpisodeFailed("crashed", "the worker closed its pipe")
        number = -code if code < 0 else (code - 128 if self._wrapped and code > 128 else 0)
        tail = self.stderr_tail()
        if number == signal.SIGXCPU:
            return EpisodeFailed("limit", "CPU time limit exceeded")
        if number:
            return EpisodeFailed("crashed", f"the worker was killed by {_signal_name(number)}{tail}")
        return EpisodeFailed("crashed", f"the worker exited with status {code}{tail}")

    def stderr_tail(self) -> str:
        try:
            text = os.read(self._stderr_fd, 4096).decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f" ({text[-500:]})" if text else ""

    def kill(self) -> None:
        self.trusted = False
        if self._popen.returncode is not None:
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)  # the whole session: whatever the worker started goes too
        except ProcessLookupError:
            pass

    async def wait(self) -> int:
        if self._pidfd is not None:
            if self._popen.returncode is None:
                await trio.lowlevel.wait_readable(self._pidfd)
            return self._popen.wait()
        while self._popen.poll() is None:
            await trio.sleep(0.01)
        return self._popen.returncode

    async def aclose(self) -> None:
        """Kill and reap; never raises for a worker that already died."""
        self.kill()
        with trio.CancelScope(shield=True):
            await self.wait()
            if not self._closed:
                self._closed = True
                for fd in (self._stdin_fd, self._stdout_fd):
                    trio.lowlevel.notify_closing(fd)
                    os.close(fd)
                os.close(self._stderr_fd)
            if self._pidfd is not None:
                trio.lowlevel.notify_closing(self._pidfd)
                os.close(self._pidfd)
                self._pidfd = None
            if self.scratch:
                scratch, self.scratch = self.scratch, None
                try:
                    os.rmdir(scratch)  # the usual case: the episodes left nothing
                except FileNotFoundError:
                    pass
                except OSError:  # whatever an environment left there, off the event loop
                    await trio.to_thread.run_sync(shutil.rmtree, scratch, True)
