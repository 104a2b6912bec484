"""End to end with a natively concurrent backend (the timed one: each request handed over as it comes, as vLLM
is): at `run.max_staleness = 0` no sample is dropped as stale, because a task starts only once its worker holds
the version its step was admitted on (`min_policy_version`, actors/worker.py). The vLLM run of the same check is
tests/e2e/test_vllm_staleness.py."""

from __future__ import annotations

import json
import subprocess

from engine.protocol.messages import unpack_ints, unpack_mask
from storage.store import Store
from tests.e2e.helpers import REPO, subprocess_env, up_command, up_script

TIMED = ["inference.backend=timed", "inference.timed_median_tokens=8", "inference.timed_max_tokens=16", "curriculum.design=false",
         "play.plays_per_env=4"]


def test_at_bound_0_a_concurrent_backend_drops_no_stale_sample(tiny_model_path, tmp_path):
    run_dir = tmp_path / "run"
    extra = [arg for setting in TIMED for arg in ("--set", setting)]  # after up_command's settings: they win
    result = subprocess.run(
        up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=3, extra=extra),
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(row["step"], row["dropped_stale"]) for row in rows if "envs_requested" in row] == [(0, 0), (1, 0), (2, 0)]
    store = Store.open(run_dir / "store", readonly=True)
    plays = [t for t in store.trajectories() if t.role == "agent" and t.status != "failed"]
    store.close()
    assert len(plays) >= 3 * 2 * 4 - 2  # 2 environments x 4 plays a step (a play may fail on a slow machine)
    for t in plays:  # every token of step s sampled by version s, the one that trains it
        versions = unpack_ints(t.sample.versions)[unpack_mask(t.sample.loss_mask) == 1]
        assert set(versions.tolist()) == {t.step}, (t.sample_id, set(versions.tolist()))
