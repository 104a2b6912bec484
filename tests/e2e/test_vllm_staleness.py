"""End to end with vLLM (`bin/test --vllm`, from .venv-vllm): at `run.max_staleness = 0` no sample is dropped as
stale. vLLM takes every request as it comes, so the first requests of a step used to reach it while the worker
was still loading the version the step was admitted on, ran on the version before, and were dropped; now a task
starts only once its worker holds that version (`min_policy_version`, actors/worker.py)."""

from __future__ import annotations

import json
import subprocess

import pytest

from engine.protocol.messages import unpack_ints, unpack_mask
from storage.store import Store
from tests.e2e.helpers import REPO, subprocess_env, up_command, up_script

pytestmark = pytest.mark.vllm

VLLM = ["inference.backend=vllm", "inference.kv_cache_gb=0.25", "inference.enforce_eager=true", "inference.max_model_len=2048"]


def test_at_bound_0_a_vllm_run_drops_no_stale_sample(tiny_model_path, tmp_path):
    run_dir = tmp_path / "run"
    extra = [arg for setting in VLLM for arg in ("--set", setting)]  # after the scripted backend's settings: they win
    result = subprocess.run(
        up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=3, extra=extra),
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "envs_requested" in row]  # the final designer flush has no plays
    assert [row["step"] for row in steps] == [0, 1, 2]
    assert [row["dropped_stale"] for row in steps] == [0, 0, 0]
    store = Store.open(run_dir / "store", readonly=True)
    plays = [t for t in store.trajectories() if t.role == "agent" and t.status != "failed"]
    store.close()
    assert plays
    for t in plays:  # every token of step s sampled by version s, the one that trains it
        versions = unpack_ints(t.sample.versions)[unpack_mask(t.sample.loss_mask) == 1]
        assert set(versions.tolist()) <= {t.step}, (t.sample_id, set(versions.tolist()))
