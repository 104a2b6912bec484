"""bin/device_check.py on the CPU: `--dry-run` runs every stage that can at tiny sizes, one JSON line per stage and a
summary line; a stage past its own timeout is killed and still gives its line, and the stages after it still run.

These stand in for the GPU run: the same stage functions and the same watchdog, with the device the CPU (gloo
instead of NCCL, fp32 instead of bf16, bytes saved for backward instead of CUDA's peak memory); the vLLM stages
report "skipped: vllm not installed" here (.venv has no vLLM).
"""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHECK = str(REPO / "bin" / "device_check.py")
STAGES = ["facts", "model", "generation", "learner", "logprob_gap", "fsdp2", "memory_4b", "vllm", "time_shared"]


def _lines(*args: str, timeout: int = 1200) -> tuple[int, list[dict], str]:
    run = subprocess.run([sys.executable, CHECK, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return run.returncode, [json.loads(line) for line in run.stdout.splitlines()], run.stderr


def test_the_dry_run_prints_a_line_per_stage_and_a_summary():
    code, lines, stderr = _lines("--dry-run")
    assert code == 0, stderr[-3000:]
    *stages, summary = lines
    assert [line["stage"] for line in stages] == STAGES
    by_stage = {line["stage"]: line for line in stages}
    assert {name: line["status"] for name, line in by_stage.items()} == {
        **{name: "ok" for name in STAGES}, "vllm": "skipped", "time_shared": "skipped"}, stderr[-3000:]
    assert by_stage["vllm"]["reason"] == "vllm not installed"
    assert by_stage["facts"]["device"] == "cpu" and by_stage["facts"]["vllm_import"] == "not installed"
    assert set(by_stage["generation"]["tokens_per_s"]) == {"1", "2"} and all(v > 0 for v in by_stage["generation"]["tokens_per_s"].values())
    assert by_stage["learner"]["tokens_per_s"] > 0 and by_stage["fsdp2"]["tokens_per_s"] > 0
    assert by_stage["logprob_gap"]["bf16_max_abs"] < 1e-4  # fp32 on the CPU: the backend and the learner agree
    assert by_stage["fsdp2"]["matches_plain"] is True and by_stage["fsdp2"]["backend"] == "gloo"
    assert by_stage["fsdp2"]["offload_matches_plain"] is True and by_stage["fsdp2"]["offload_tokens_per_s"] > 0
    memory = by_stage["memory_4b"]
    # checkpointing keeps a layer's input only: far less per token than every activation of the layer
    assert 0 < memory["per_layer_kb_per_token_checkpointed"] < memory["per_layer_kb_per_token"] / 5
    assert memory["publish_gb"] > 0 and memory["publish_s"] > 0
    assert summary["check"] == "device" and summary["dry_run"] is True and summary["ok"] is True
    assert summary["stages"] == {name: line["status"] for name, line in by_stage.items()}
    assert summary["fsdp2_matches_plain"] is True


def test_a_stage_past_its_timeout_gives_its_line_and_the_run_goes_on():
    # facts, then the model stage cut at 0.2 s (its process is killed), then the learner: no model to load
    code, lines, stderr = _lines("--dry-run", "--stage", "facts", "--stage", "learner", "--timeout", "model=0.2", timeout=600)
    assert code == 1, stderr[-3000:]  # not every stage ran
    facts, model, learner, summary = lines
    assert (facts["stage"], facts["status"]) == ("facts", "ok")
    assert model == {"stage": "model", "status": "timeout", "timeout_s": 0.2}
    assert (learner["stage"], learner["status"]) == ("learner", "skipped") and "model stage ended timeout" in learner["reason"]
    assert summary["stages"] == {"facts": "ok", "model": "timeout", "learner": "skipped"} and summary["ok"] is False


def test_bad_arguments_are_refused_in_one_line():
    for args, words in ((["--stage", "warp"], "unknown --stage warp"), (["--timeout", "facts=soon"], "--timeout 'facts=soon'")):
        run = subprocess.run([sys.executable, CHECK, "--dry-run", *args], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and words in run.stderr and run.stdout == ""
