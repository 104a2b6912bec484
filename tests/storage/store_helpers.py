"""What the store damage and read-only/full tests share: a store made here, the code their subprocesses run
(a reader of every record) and runners that check a subprocess ended by itself, with an answer of ours."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path


from engine.protocol.messages import Sample, pack_floats, pack_ints, pack_mask
from storage.records import BatchEntry, BatchRecord, MemoryRecord, RunState, TrajectoryRecord
from storage.store import Store

REPO = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------ the code the subprocesses run
RECORDS_CODE = r'''
import os, sys
from engine.protocol.messages import Sample, pack_floats, pack_ints, pack_mask
from storage.records import TrajectoryRecord

def trajectory(sample_id, step, tokens):
    sample = Sample(
        sample_id=sample_id, role="agent", env_id="e", skill="s", arm="hint", step=step, tokens=pack_ints(range(tokens)),
        loss_mask=pack_mask([1] * tokens), logprobs=pack_floats([0.0] * tokens), versions=pack_ints([0] * tokens), reward=1.0,
    )
    return TrajectoryRecord(
        sample_id=sample_id, role="agent", env_id="e", skill="s", arm="hint", step=step, seed=1, status="completed",
        failure="", episode_return=1.0, turns=[], sample=sample, created_at=0.0,
    )
'''

# Open read-only and read every record of every database; print one JSON line: {"ok": records} or {"error": class,
# "message": ...} for an error of ours (SpadeError). Anything else is a traceback (exit 1).
READ_ALL_CODE = r'''
def read_all(path):
    from engine.protocol.errors import SpadeError
    from storage.store import DATABASES, Store
    try:
        store = Store.open(path, readonly=True)
        try:
            n = sum(1 for name in ("environments", "trajectories", "memory", "designer_rewards", "batches")
                    for _ in getattr(store, name)())
            store.state()
            counts = store.counts()
        finally:
            store.close()
        return {"ok": n, "counts": counts}
    except SpadeError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
'''

READER_CODE = READ_ALL_CODE + r'''
import json, sys
print(json.dumps(read_all(sys.argv[1])))
'''

def subprocess_env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def run_python(code: str, *args, prefix: list[str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*(prefix or []), sys.executable, "-c", code, *map(str, args)],
        capture_output=True, text=True, cwd=REPO, env=subprocess_env(), timeout=timeout, check=False,
    )


def run_shell(script: str, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `script` with sh inside a private mount namespace (nothing it mounts leaks); $1.. are args."""
    return subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, env=subprocess_env(), timeout=timeout, check=False)


def not_killed(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"


def answer_of(proc: subprocess.CompletedProcess) -> dict:
    not_killed(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # a traceback is a failure: only our errors are answers
    return json.loads(proc.stdout.strip().splitlines()[-1])


def read_store(path: Path, prefix: list[str] | None = None) -> dict:
    return answer_of(run_python(READER_CODE, path, prefix=prefix))


# ------------------------------------------------------------------ a store made here
def trajectory_record(sample_id: str, step: int, tokens: int) -> TrajectoryRecord:
    sample = Sample(
        sample_id=sample_id, role="agent", env_id="e", skill="s", arm="hint", step=step, tokens=pack_ints(range(tokens)),
        loss_mask=pack_mask([1] * tokens), logprobs=pack_floats([0.0] * tokens), versions=pack_ints([0] * tokens), reward=1.0,
    )
    return TrajectoryRecord(
        sample_id=sample_id, role="agent", env_id="e", skill="s", arm="hint", step=step, seed=1, status="completed",
        failure="", episode_return=1.0, turns=[], sample=sample, created_at=0.0,
    )


RECORDS = 5 * 20 + 6 + 5  # trajectories, memory, batches


def make_store(path: Path) -> Path:
    """A few steps of records: small ones inline in leaf pages, large ones in overflow pages."""
    store = Store.open(path)
    for step in range(5):
        with store.batch() as batch:
            for i in range(20):
                batch.put_trajectory(trajectory_record(f"t{i}", step, random.Random(i).choice([3, 40, 900])))
            batch.put_batch(BatchRecord(version=step, step=step, checkpoint=False, entries=[BatchEntry(f"{step:08d}/t0", 0.5, 1.0)]))
            batch.put_state(RunState(steps_done=step + 1, batches=step + 1))
    with store.batch() as batch:
        for i in range(6):
            batch.put_memory(MemoryRecord(env_id=f"m{i}", skill="s", name="MEnv", code="x" * 300, win_rate=0.5, regret=0.1, step=4, source="designed"))
    store.close()
    return path


