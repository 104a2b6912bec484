"""`up`'s check that the learner fits its GPUs, before any process starts: learner/memory_plan.py run as a child
process (the engine does not import torch), the way engine/tools/models.py converts the default model.

    record = check_learner_memory(config, model_path)   # None: nothing to check (CPU); else the plan's JSON record
                                                        # (peak_bytes, resident_bytes per rank); InputError if it does not fit
    resolve_offload(config, record)                     # learner.cpu_offload "auto" -> "on" / "off", as planned

Skipped, at no cost, when the learner runs on the CPU: `learner.device = "cpu"`, or a machine with no NVIDIA GPU
(no nvidia-smi, no /proc/driver/nvidia/gpus). With GPUs the child measures the model's activations on a CPU slice
(seconds) and plans against the smallest of the learner's GPUs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from engine.protocol.errors import InputError, RunFailed

REPO = Path(__file__).resolve().parents[2]
REFUSED_EXIT = 3  # learner/memory_plan.py: the plan does not fit


def has_nvidia_gpu() -> bool:
    gpus = Path("/proc/driver/nvidia/gpus")
    return (gpus.is_dir() and any(gpus.iterdir())) or shutil.which("nvidia-smi") is not None


def memory_plan_command(config, model_path: str | Path, python: str = sys.executable) -> list[str]:
    """learner/memory_plan.py's command line for this config's learner."""
    learner = config.learner
    argv = [python, "-m", "learner.memory_plan", "--model", str(model_path), "--world-size", str(learner.world_size),
            "--micro-batch-tokens", str(learner.micro_batch_tokens), "--gpu-gb", "auto", "--dtype", config.model.dtype]
    if learner.gpus:
        argv += ["--gpus", ",".join(map(str, learner.gpus))]
    if learner.activation_checkpointing:
        argv.append("--checkpointing")
    if learner.objective.kl_coef > 0:
        argv.append("--kl-reference")
    if learner.lora_rank > 0:
        argv.append("--lora")
    else:
        argv += ["--cpu-offload", learner.cpu_offload]
    return argv


def resolve_offload(config, record: dict | None) -> None:
    """`learner.cpu_offload = "auto"` made "on" or "off" as the plan chose (the learner reads the run's config.toml,
    where "auto" would mean off). Nothing planned (the CPU): left as it is."""
    if record is not None and config.learner.cpu_offload == "auto":
        config.learner.cpu_offload = "on" if record.get("cpu_offload") else "off"


def check_learner_memory(config, model_path: str | Path, say=print) -> dict | None:
    """The learner's memory plan on this node's GPUs; InputError (one line naming the fix) when it does not fit."""
    if config.learner.device == "cpu" or config.learner.simulated_update_s > 0:
        return None
    if config.learner.device == "auto" and not has_nvidia_gpu():
        return None
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"))
    result = subprocess.run(memory_plan_command(config, model_path), cwd=REPO, env=env, capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode not in (0, REFUSED_EXIT) or not lines:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-5:])
        raise RunFailed(f"the learner's memory plan failed (python -m learner.memory_plan):\n{tail}")
    record = json.loads(lines[-1])
    if record.get("skipped"):
        return None
    say("\n".join(line for line in result.stdout.splitlines() if not line.startswith("{")))
    if result.returncode == REFUSED_EXIT:
        raise InputError(record["refusal"])
    return record
