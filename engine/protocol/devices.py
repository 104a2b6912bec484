"""Which GPUs a process sees: the one CUDA_VISIBLE_DEVICES selection the inference workers (`inference.gpus`,
actors/inference/vllm.py) and the learner (`learner.gpus`, learner/distributed.py) share; and on CPU, how many
threads each runs and on which cores. No torch here: it must run before CUDA starts, and the caller checks the
devices afterwards if it can.

    select_gpus([1, 2], "learner.gpus")   # CUDA_VISIBLE_DEVICES=1,2, or the 2nd and 3rd of one already set
    threads, pin = cpu_share(config, "learner")   # the learner's threads on CPU, and its cores when it shares them
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

def cpu_share(config, role: str) -> tuple[int, list[int] | None]:
    """(threads, cores to pin them to or None) for the learner (`role` "learner") or a rollout worker's generator
    ("inference") on CPU. Its own `threads` when set; else every core, or, when the two overlap on the CPU
    (`run.max_staleness` > 0 with workers started by `up`, no `inference.gpus`, neither with its own `threads`),
    the generator the lower half of the cores this process may use and the learner the rest, so that neither spins
    on the other's cores (overlapped on all cores, an update of 509 tokens took 109 s against about 3 s alone)."""
    own = config.learner.threads if role == "learner" else config.inference.threads
    if own:
        return own, None
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    overlapped = config.run.max_staleness > 0 and config.worker.count > 0 and not config.inference.gpus
    if overlapped and len(cores) > 1 and not config.inference.threads and not config.learner.threads:
        half = len(cores) // 2
        part = cores[:half] if role == "inference" else cores[half:]
        return len(part), part
    return os.cpu_count() or 1, None


def core_list(cores: list[int]) -> str:
    """`cores` as VLLM_CPU_OMP_THREADS_BIND spells one rank's cores: "2-3" when they run on, else "0,2"."""
    if cores == list(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(map(str, cores))


def pin_process(cores: list[int]) -> None:
    """Run every thread of this process, and whatever it starts later, on `cores` (Linux; elsewhere a no-op)."""
    if not hasattr(os, "sched_setaffinity"):
        return
    tasks = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["0"]
    for tid in tasks:
        try:
            os.sched_setaffinity(int(tid), cores)
        except (ProcessLookupError, PermissionError):
            continue  # a thread that ended meanwhile
