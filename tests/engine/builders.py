"""Builders the engine's tests share: samples, stored design trajectories, design tasks and results, the seeds,
scripted workers, and a Designs over a fresh store."""

from __future__ import annotations

import random

import trio

from engine.curriculum import Passage, PassageSampler, SeedEnvironment
from engine.protocol.config_loading import load_config
from engine.protocol.messages import DesignResult, DesignTask, Sample, TaskFailed, pack_floats, pack_ints, pack_mask
from engine.refresh import Designs
from storage.records import TrajectoryRecord
from storage.store import Store


def make_sample(sample_id, role, env_id, skill, arm, step) -> Sample:
    return Sample(
        sample_id=sample_id, role=role, env_id=env_id, skill=skill, arm=arm, step=step,
        tokens=pack_ints([1, 2, 3]), loss_mask=pack_mask([0, 1, 1]), logprobs=pack_floats([0, -1, -2]),
        versions=pack_ints([-1, 0, 0]), reward=0.0,
    )


def design_trajectory(env_id, skill, step=0) -> TrajectoryRecord:
    """The stored designer trajectory of environment `env_id` (its sample id is f"d-{env_id}")."""
    sample_id = f"d-{env_id}"
    return TrajectoryRecord(
        sample_id=sample_id, role="designer", env_id=env_id, skill=skill, arm="no_hint", step=step, seed=0, status="designed",
        failure="", episode_return=0.0, turns=[], sample=make_sample(sample_id, "designer", env_id, skill, "no_hint", step), created_at=0.0,
    )


# --- design results as the workers hand them back (engine/refresh.py, engine/revalidate.py)

CHECKS_OK = [("parse", True, ""), ("reset", True, "")]
CHECKS_BAD = [("parse", True, ""), ("reset", False, "reset raised ValueError")]


def design_result(task, valid=True, tokens=100) -> DesignResult:
    """A worker's answer to design task `task`: valid (an `{skill}Env` class) or rejected by its reset check."""
    return DesignResult(
        task_id=task.task_id, worker_id="w1", skill=task.skill, passage_id=task.passage_id, attempt=task.attempt,
        reply=f"reply to {task.task_id}", code=f"class Helper: ...\nclass {task.skill}Env: ..." if valid else "class Broken: ...",
        valid=valid, reason="" if valid else "reset failed: reset raised ValueError", checks=CHECKS_OK if valid else CHECKS_BAD,
        hint=f"hint {task.task_id}", designer=make_sample(task.task_id, "designer", task.task_id, task.skill, "design", task.step),
        tokens_generated=tokens if valid else 7, seconds=1.0,
    )


SEEDS = [
    SeedEnvironment(name="alpha", skill="A", code="class Grid:\n    pass\n\nclass AlphaEnv:\n    pass\n", hint="alpha hint"),
    SeedEnvironment(name="beta", skill="B", code="class BetaEnv:\n    pass\n", hint="beta hint"),
]


def make_designs(tmp_path, *overrides):
    """Designs over a fresh store: skills A and B, 3 slots, 3 attempts, no revalidation and no edits unless overridden."""
    config = load_config(overrides=[
        'curriculum.skills=["A", "B"]', "curriculum.skills_per_refresh=2", "curriculum.envs_per_step=3",
        "curriculum.design_attempts=3", "curriculum.revalidate=false", "curriculum.edit_share=0",  # (edits: test_refresh.py)
        *overrides,  # revalidation: tests/engine/test_revalidate.py
    ])
    store = Store.open(tmp_path / "store")
    sampler = PassageSampler([Passage(f"p{i}", f"passage number {i}") for i in range(20)], seed=0)
    return Designs(config, store, sampler, random.Random(0)), store


class Workers:
    """Scripted workers: each design task's verdict by task id ("valid", "rejected" or "failed"); rejected otherwise."""

    def __init__(self, verdicts=None, default="rejected"):
        self.verdicts = verdicts or {}
        self.default = default
        self.calls = []

    async def __call__(self, label, tasks):
        await trio.lowlevel.checkpoint()
        self.calls.append((label, tasks))
        out = []
        for task in tasks:
            verdict = self.verdicts.get(task.task_id, self.default)
            if verdict == "failed":
                out.append(TaskFailed(task_id=task.task_id, worker_id="w9", reason="worker lost"))
            else:
                out.append(design_result(task, valid=verdict == "valid"))
        return out

    def task_ids(self):
        return [[t.task_id for t in tasks] for _, tasks in self.calls]


# --- the result checks' task and results (engine/peers/result_checks.py, engine/revalidate.py)

DESIGN_TASK = DesignTask(task_id="s0000-e00-a1", skill="k", skill_description="", passage_id="p", passage="", examples=[],
                         negatives=[], attempt=1, step=0)


def checked_sample(sample_id="s0000-e-no_hint-00", role="agent", arm="no_hint", env_id="e", step=0, tokens=(5, 6, 7, 8), mask=(0, 1, 1, 1),
                   logprobs=(0.0, -1.0, -2.0, -0.5), versions=(-1, 3, 3, 3), reward=1.0, **extra) -> Sample:
    """A sample whose values pass the result checks (vocabulary 100, newest version 3) unless overridden."""
    return Sample(
        sample_id=sample_id, role=role, env_id=env_id, skill="k", arm=arm, step=step, tokens=pack_ints(tokens),
        loss_mask=pack_mask(mask), logprobs=pack_floats(logprobs), versions=pack_ints(versions), reward=reward, **extra,
    )


def checked_design(sample=None, **extra) -> DesignResult:
    """A valid DesignResult answering DESIGN_TASK, with `extra` fields replaced."""
    fields = dict(
        task_id=DESIGN_TASK.task_id, worker_id="w", skill="k", passage_id="p", attempt=1, reply="", code="class E: ...",
        valid=True, reason="", checks=[], hint="h",
        designer=sample or checked_sample(sample_id=DESIGN_TASK.task_id, role="designer", arm="design", env_id=DESIGN_TASK.task_id, reward=0.0),
        tokens_generated=3, seconds=0.5,
    )
    return DesignResult(**(fields | extra))
