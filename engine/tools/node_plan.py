"""`up`'s plan for the node before anything starts: where each process goes and whether the learner fits.

    plan = plan_node(config, model_path)   # PlacementError / InputError: one line naming the fix
    record_plan(paths, plan)               # run.json's `placement`, and the plan on the terminal (GPUs only)

Planned twice on GPUs: once for the learner's GPUs and world size (engine/protocol/placement.py), then with the
learner's measured memory (learner/memory_plan.py in a child process, engine/tools/learner_memory.py; a learner
that does not fit is refused there), which also sizes a time-shared engine's share and resolves
`learner.cpu_offload = "auto"`. The plan's counts (learner.gpus, learner.world_size, worker.count, the offload) go
into `config` before config.toml is written. On a machine without GPUs nothing changes.
"""

from __future__ import annotations

from engine.protocol.node_memory import measured_learner_memory
from engine.protocol.placement import apply_plan, format_plan, plan_placement, plan_record
from engine.tools.learner_memory import check_learner_memory, resolve_offload


def plan_node(config, model_path):
    plan = plan_placement(config, model_path, check_learner=False)
    apply_plan(config, plan)
    if plan.layout == "cpu":
        return plan
    record = check_learner_memory(config, model_path)  # None where the learner is not on real GPUs: the estimate
    resolve_offload(config, record)
    plan = plan_placement(config, model_path, learner_mem=measured_learner_memory(record) if record else None)
    apply_plan(config, plan)
    return plan


def record_plan(paths, plan) -> None:
    """The plan in run.json (`placement`; the engine starts its children from it) and on the terminal."""
    paths.update_meta(placement=plan_record(plan))
    if plan.layout != "cpu":
        print(format_plan(plan))
