"""End to end: with `run.max_staleness` > 0 the learner and the rollout worker overlap, so on CPU they split the
cores (engine/protocol/devices.py): the worker runs on the lower half, the learner on the rest, and the run
finishes. Read from /proc while the run is under way."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.helpers import up_command, up_script, wait_for_text


def _cores(pid: int) -> set[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            found = set()
            for part in line.split(":", 1)[1].strip().split(","):
                low, _, high = part.partition("-")
                found |= set(range(int(low), int(high or low) + 1))
            return found
    raise AssertionError(f"no Cpus_allowed_list for {pid}")


def _role(pid: int) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return "learner" if b"learner.train" in argv else "worker" if b"actors.worker" in argv else ""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: nothing to split")
def test_overlapped_learner_and_worker_run_on_their_own_cores(tiny_model_path, tmp_path, processes):  # noqa: F811
    run_dir = tmp_path / "run"
    output = tmp_path / "engine.out"
    extra = ["--set", "run.max_staleness=1"]
    with open(output, "w") as out:
        engine = processes.popen(up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=3, extra=extra), stdout=out, stderr=subprocess.STDOUT)
    wait_for_text(output, "step 1: designs", time.monotonic() + 300)  # both children loaded and serving
    roles = {_role(pid): pid for pid in processes.track(engine.pid)}
    assert {"learner", "worker"} <= set(roles), roles
    mine = sorted(os.sched_getaffinity(0))
    half = len(mine) // 2
    assert _cores(roles["worker"]) == set(mine[:half]) and _cores(roles["learner"]) == set(mine[half:])
    assert engine.wait(timeout=300) == 0, output.read_text()[-4000:]
