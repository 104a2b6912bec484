"""What the end-to-end tests share: the repository, the scripted `up` run of test_up.py (its script, command
line and environment) and `Processes`, which ends only the processes a test started and their descendants."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
K = 1


def up_script(tmp_path: Path) -> Path:
    valid = (DATA / "pick_env.py").read_text()
    invalid = "class Broken:\n    def reset(self):\n        return 'no Env class here'\n"
    script = {
        "designer": [valid + "```\n", invalid + "```\n"],
        "hint": ["The hidden number is one of two; answer with one of them."],
        "agent": ["\\boxed{1}", "I pick \\boxed{2}", "hmm \\boxed{1}"],
    }
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return path


def up_command(tiny_model_path: str, run_dir: Path, script: Path, steps: int, extra=()) -> list[str]:
    return [
        sys.executable, "-m", "engine.cli", "up", "--no-live",
        "--model", tiny_model_path, "--run-dir", str(run_dir), "--steps", str(steps),
        "--set", "inference.backend=scripted", "--set", f"inference.script={json.dumps(str(script))}",
        "--set", f"curriculum.refresh_interval={K}", "--set", "curriculum.envs_per_step=2",
        "--set", "curriculum.skills_per_refresh=2", "--set", "curriculum.design_attempts=1",
        "--set", "run.max_staleness=0", "--set", "play.max_turns=2", "--set", "learner.learning_rate=1e-3",
        "--set", f"play.designer_prefill={json.dumps(chr(96) * 3 + 'python' + chr(10))}",
        # fresh designs only and groups of 2 (edit tasks: test_edit_designs.py), as these tests were sized
        "--set", "curriculum.edit_share=0", "--set", "play.plays_per_env=2", "--set", "play.hint_plays_per_env=2",
        *extra,
    ]


def wait_for_text(path: Path, text: str, deadline: float) -> None:
    """Until `text` is in the file at `path` (an engine's output), or fail at `deadline` (time.monotonic) with it."""
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared in {path}:\n{path.read_text() if path.exists() else ''}")


def state_and_done_ids(run_dir: Path):
    """The run's state and the ids of every trajectory and environment it stored (read-only)."""
    from storage.store import Store

    store = Store.open(run_dir / "store", readonly=True)
    try:
        return store.state(), {t.sample_id for t in store.trajectories()} | {e.env_id for e in store.environments()}
    finally:
        store.close()


def subprocess_env():
    return dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")


def _stats() -> dict[int, tuple[str, int, str]]:
    """Every process now: pid -> (state, parent pid, start time), from /proc."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # gone meanwhile
            found[int(name)] = (fields[0], int(fields[1]), fields[19])
    return found


class Processes:
    """The processes a test starts, and their descendants: known by pid and start time (a reused pid is never
    taken for one of them), found through /proc's parent links, never by a name; `end_all` ends only those."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen] = []
        self.known: dict[int, str] = {}

    def popen(self, argv: list[str], **kwargs) -> subprocess.Popen:
        """Popen in the repository, in a process group of its own (so `end` can kill the group)."""
        proc = subprocess.Popen(argv, cwd=REPO, env=subprocess_env(), start_new_session=True, **kwargs)
        self.started.append(proc)
        return proc

    def run(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        """subprocess.run(argv, capture_output=True, text=True, timeout=timeout), started by `popen`."""
        proc = self.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.end(proc)
            raise
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def track(self, pid: int) -> list[int]:
        """Remember `pid`'s descendants as they are now (they can be found no more once it died); returns its
        children."""
        stats = _stats()
        below = {parent: [] for parent in stats}
        for p, (_, ppid, _) in stats.items():
            below.setdefault(ppid, []).append(p)
        todo = list(below.get(pid, ()))
        while todo:
            p = todo.pop()
            self.known[p] = stats[p][2]
            todo += below[p]
        return list(below.get(pid, ()))

    def alive(self, pids) -> list[int]:
        """Those of `pids` (remembered by `track`) that still run; a zombie does not."""
        stats = _stats()
        return [p for p in pids if p in stats and stats[p][0] != "Z" and stats[p][2] == self.known.get(p)]

    def end(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:  # not reaped, so its pid (and group id) is still its own
            self.track(proc.pid)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.communicate()

    def end_all(self) -> None:
        for proc in self.started:
            self.end(proc)
        for pid in self.alive(self.known):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
