"""bin/device_check.py --dry-run: every step of the GPU check runs on the CPU at tiny sizes and ends with its JSON."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_device_check_dry_run_ends_with_its_json_line():
    run = subprocess.run([sys.executable, str(REPO / "bin" / "device_check.py"), "--dry-run"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["check"] == "device" and result["dry_run"] is True
    assert set(result["generation_tokens_per_s"]) == {"1", "2"} and all(v > 0 for v in result["generation_tokens_per_s"].values())
    assert result["train_tokens_per_s"] > 0 and result["fsdp2_tokens_per_s"] > 0
    assert result["logprob_gap"]["max_abs"] < 1e-4  # fp32 on the CPU: the backend and the learner agree
    assert result["fsdp2_matches_plain"] is True and result["fsdp2_grad_norm_ratio"] is not None
