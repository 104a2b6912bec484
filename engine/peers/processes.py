"""Starting and supervising the learner and rollout-worker processes of a run.

Children run in their own sessions (so a terminal's Ctrl-C reaches the engine alone, which then stops them in
order), log to `run_dir/logs/NAME.log`, and are stopped with SIGTERM, then SIGKILL after a grace period.
A worker that dies is restarted (up to `max_restarts` times in any 10 minutes); a learner that dies ends the run with its log's tail.
Children watch the engine's pid and stop when it is gone (engine/protocol/lifeline.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import trio

from engine.protocol.errors import RunFailed
from engine.protocol.lifeline import ENGINE_PID_ENV, LEARNER_TOKEN_ENV
from engine.protocol.paths import RunPaths

REPO = Path(__file__).resolve().parents[2]


class ChildFailed(RunFailed):
    """A child process the run cannot do without exited."""


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Child:
    def __init__(self, name: str, argv: list[str], paths: RunPaths, env: dict[str, str] | None = None):
        self.name = name
        self.argv = argv
        self.env = env or {}
        self.log = paths.logs / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        env[ENGINE_PID_ENV] = str(os.getpid())  # the child stops if the engine dies (engine/protocol/lifeline.py)
        env.update(self.env)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO, env=env, start_new_session=True
            )

    def stop(self, grace_s: float = 20.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait()


def learner_command(python: str, run_dir: str | Path, world_size: int) -> list[str]:
    """The learner process's argv: plain `python -m learner.train` for one process, torchrun (FSDP2 over N
    processes of one node, learner/distributed.py) for more."""
    if world_size < 1:
        raise ValueError(f"learner.world_size must be at least 1 (got {world_size})")
    train = ["-m", "learner.train", "--run-dir", str(run_dir)]
    if world_size == 1:
        return [python, *train]
    return [python, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node", str(world_size), *train]


def learner_child(paths: RunPaths, world_size: int = 1, token: str = "") -> Child:
    """`token`: the secret the learner says in its hello (engine/peers/auth.py), passed in its environment."""
    return Child("learner", learner_command(sys.executable, str(paths.root), world_size), paths, env={LEARNER_TOKEN_ENV: token})


def worker_child(paths: RunPaths, worker_id: str, env: dict[str, str] | None = None) -> Child:
    """`env`: the worker's placement on a GPU node (engine/protocol/placement.py worker_env: its GPUs, vLLM's memory
    share, sleep mode); a restarted worker keeps it."""
    argv = [sys.executable, "-m", "actors.worker", "--run-dir", str(paths.root), "--worker-id", worker_id]
    return Child(f"worker-{worker_id}", argv, paths, env=env)


RESTART_WINDOW_S = 600.0


async def supervise(
    child: Child,
    *,
    restartable: bool,
    max_restarts: int,
    on_exit: Callable[[Child, int], None],
    stopping: Callable[[], bool],
    window_s: float = RESTART_WINDOW_S,
) -> None:
    """Poll the child; restart a dead worker (at most `max_restarts` times in any `window_s` seconds, so a
    worker that crashes now and then over a long run keeps being restarted), raise ChildFailed for anything
    else the run needs."""
    child.start()
    restarts: list[float] = []
    while True:
        await trio.sleep(0.5)
        code = child.proc.poll()
        if code is None or stopping():
            continue
        on_exit(child, code)
        now = trio.current_time()
        restarts = [t for t in restarts if now - t < window_s]
        if restartable and len(restarts) < max_restarts:
            restarts.append(now)
            child.restarts += 1
            child.start()
            continue
        raise ChildFailed(f"{child.name} exited with code {code}; the end of {child.log}:\n{log_tail(child.log)}")
