"""The client side of the Reasoning-Gym process (actors/reasoning_gym/worker.py): problems and scores, with timeouts.

    rg = reasoning_gym_process()                       # one per process, started on first use
    question, answer = await rg.problem(task)          # raises ReasoningGymError when the problem cannot be made
    score, failure = await rg.score(task, "42")        # (0.0, "timeout: ...") when the scorer hangs or crashes

Calls are serialised (one child); a call that runs past its timeout, or a child that dies, kills the child's whole
session and the next call starts a fresh one, so a hostile answer costs one score of 0 and never the run.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgspec
import trio

from engine.protocol.errors import RunFailed
from engine.protocol.messages import ReasoningGymTask

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0
PROBLEM_TIMEOUT_S = 60.0
SCORE_TIMEOUT_S = 10.0


class ReasoningGymError(RunFailed, RuntimeError):
    """A problem could not be made (unknown dataset, bad parameters, the process failed)."""


class ReasoningGymProcess:
    def __init__(self, *, score_timeout_s: float = SCORE_TIMEOUT_S, problem_timeout_s: float = PROBLEM_TIMEOUT_S):
        self.score_timeout_s = score_timeout_s
        self.problem_timeout_s = problem_timeout_s
        self._proc: subprocess.Popen | None = None
        self._buffer = b""
        self._lock = threading.Lock()
        self._scratch = tempfile.mkdtemp(prefix="spade-rg-")
        self.seccomp = ""
        self.restarts = 0

    # ------------------------------------------------------------------ the child
    def _start(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
                   OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLCONFIGDIR=self._scratch,
                   MPLBACKEND="Agg")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "actors.reasoning_gym.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, cwd=self._scratch, env=env, start_new_session=True,
        )
        self._buffer = b""
        ready = self._read_line(time.monotonic() + START_TIMEOUT_S)
        if ready is None or not ready.get("ready"):
            self._kill()
            raise ReasoningGymError("the Reasoning-Gym process did not start (is reasoning-gym installed? pip install reasoning-gym)")
        self.seccomp = ready.get("seccomp", "")

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        proc.wait()

    def _read_line(self, deadline: float) -> dict | None:
        """The next reply, or None when the child is gone or the deadline passed."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            return None

    def call(self, request: dict, timeout_s: float) -> dict:
        """One request and its reply (blocking); {"ok": false, "error": "timeout: ..."} when it ran too long."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                if self._proc is not None:
                    self._kill()
                    self.restarts += 1
                self._start()
            try:
                self._proc.stdin.write((json.dumps(request) + "\n").encode())
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError):
                self._kill()
                return {"ok": False, "error": "crashed: the Reasoning-Gym process died"}
            reply = self._read_line(time.monotonic() + timeout_s)
            if reply is None:
                alive = self._proc.poll() is None
                self._kill()
                self.restarts += 1
                return {"ok": False, "error": f"timeout: took longer than {timeout_s:g} s" if alive else "crashed: the Reasoning-Gym process died"}
            return reply

    def close(self) -> None:
        with self._lock:
            self._kill()

    # ------------------------------------------------------------------ async API
    async def problem(self, task: ReasoningGymTask) -> tuple[str, str | None]:
        request = {"op": "problem", "task": msgspec.to_builtins(task)}
        reply = await trio.to_thread.run_sync(self.call, request, self.problem_timeout_s)
        if not reply.get("ok"):
            raise ReasoningGymError(f"{task.dataset}: {reply.get('error', 'no reply')}")
        return reply["question"], reply.get("answer")

    async def score(self, task: ReasoningGymTask, answer: str) -> tuple[float, str]:
        request = {"op": "score", "task": msgspec.to_builtins(task), "answer": answer}
        reply = await trio.to_thread.run_sync(self.call, request, self.score_timeout_s)
        if not reply.get("ok"):
            return 0.0, f"score: {reply.get('error', 'no reply')}"
        return float(reply["score"]), ""


_SHARED: ReasoningGymProcess | None = None


def reasoning_gym_process() -> ReasoningGymProcess:
    """This process's Reasoning-Gym child (started on first call, killed at exit)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = ReasoningGymProcess()
        atexit.register(_SHARED.close)
    return _SHARED
