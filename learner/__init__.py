"""The learner process: GRPO updates with off-policy corrections (trainer.py, objectives.py, packing.py), on one
process or under FSDP2 (distributed.py), dtypes and the publish check (precision.py, cast_check.py), checkpoints,
and the memory plan a GPU run is checked against (memory_plan.py, activation_memory.py)."""
