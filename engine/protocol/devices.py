"""Which GPUs a process sees: the one CUDA_VISIBLE_DEVICES selection the inference workers (`inference.gpus`,
actors/inference/vllm.py) and the learner (`learner.gpus`, learner/distributed.py) share. No torch here: it must
run before CUDA starts, and the caller checks the devices afterwards if it can.

    select_gpus([1, 2], "learner.gpus")   # CUDA_VISIBLE_DEVICES=1,2, or the 2nd and 3rd of one already set
"""

from __future__ import annotations

import os


def select_gpus(gpus, field: str) -> None:
    """Make only `gpus` visible to this process: indices into an existing CUDA_VISIBLE_DEVICES, else device
    numbers. Empty: leave the environment as it is. ValueError (naming `field`) for an index past the ones shown."""
    if not gpus:
        return
    existing = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if existing and max(gpus) >= len(existing):
        raise ValueError(f"{field} = {list(gpus)}: CUDA_VISIBLE_DEVICES shows only {len(existing)} GPUs ({','.join(existing)})")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(existing[g] if existing else str(g) for g in gpus)
