"""A small hand-made run directory (config, run.json, metrics.jsonl, LMDB store) with known numbers, for replay,
rescore, export, inspect and report tests that need no processes (the `small_run` fixture in conftest.py).

Step 0 (k = 1) made two valid environments of one skill and one rejected design. Returns:
    A (s0000-e00-a1): no hint [0, 1], hint [1, 1]      B (s0000-e01-a1): no hint [0, 0], hint [0, 0]
The step's batch trained the four unhinted plays; the designer rewards are stored as a blend run computes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from engine.protocol.config_loading import dump_config, load_config
from engine.protocol.messages import Sample, TurnRecord, pack_floats, pack_ints, pack_mask
from engine.protocol.paths import RunPaths
from storage.records import (
    BatchEntry,
    BatchRecord,
    DesignerRewardRecord,
    EnvironmentRecord,
    MemoryRecord,
    RunState,
    TrajectoryRecord,
)
from storage.store import Store, trajectory_key

ENV_A, ENV_B, ENV_BAD = "s0000-e00-a1", "s0000-e01-a1", "s0000-e02-a1"
CODE = "class PickEnv:\n    def reset(self, seed=None):\n        return 'Pick 1 or 2.', {}\n\n    def step(self, action):\n        return 'ok', 1.0, True, False, {}\n"
RETURNS = {(ENV_A, "no_hint"): [0.0, 1.0], (ENV_A, "hint"): [1.0, 1.0], (ENV_B, "no_hint"): [0.0, 0.0], (ENV_B, "hint"): [0.0, 0.0]}


def sample(sample_id: str, env_id: str, arm: str, role: str = "agent", n: int = 6, reward: float = 0.0) -> Sample:
    return Sample(
        sample_id=sample_id, role=role, env_id=env_id, skill="Logic", arm=arm, step=0, tokens=pack_ints(range(10, 10 + n)),
        loss_mask=pack_mask([0] * (n // 2) + [1] * (n - n // 2)), logprobs=pack_floats([0.0] * (n // 2) + [-0.5] * (n - n // 2)),
        versions=pack_ints([-1] * (n // 2) + [0] * (n - n // 2)), reward=reward, temperature=0.6,
    )


def env_record(env_id: str, valid: bool, reason: str = "", hint: str = "Pick the one you see.") -> EnvironmentRecord:
    return EnvironmentRecord(
        env_id=env_id, skill="Logic", step_created=0, source="designed", passage_id="p1", attempt=1, code=CODE if valid else "class Broken: pass",
        reply="```python\n...", hint=hint if valid else "", valid=valid, reason=reason,
        checks=[("parses", True, "ast.parse succeeded"), ("single_env_class", valid, "one Env class" if valid else "no Env class")],
        designer_sample_id=env_id, worker_id="w0", created_at=1.5,
    )


@dataclass
class SmallRun:
    paths: RunPaths
    agent_keys: list[str]


def make_small_run(root) -> SmallRun:
    paths = RunPaths(root)
    paths.root.mkdir(parents=True, exist_ok=True)
    config = load_config(overrides=["curriculum.refresh_interval=1", "run.steps=1"])
    paths.config.write_text(dump_config(config))
    paths.update_meta(model_path=str(paths.root / "no-model"))
    store = Store.open(paths.store)
    keys = []
    with store.batch() as batch:
        for env in (env_record(ENV_A, True), env_record(ENV_B, True), env_record(ENV_BAD, False, "single_env_class: no Env class")):
            batch.put_environment(env)
            batch.put_trajectory(TrajectoryRecord(
                sample_id=env.env_id, role="designer", env_id=env.env_id, skill="Logic", arm="design", step=0, seed=0,
                status="designed" if env.valid else "rejected", failure=env.reason, episode_return=0.0, turns=[],
                sample=sample(env.env_id, env.env_id, "design", role="designer"), created_at=1.0,
            ))
        for (env_id, arm), returns in RETURNS.items():
            for i, ret in enumerate(returns):
                sample_id = f"p-{env_id}-{arm}-{i}"
                turn = TurnRecord(action=str(i + 1), parse_rule="boxed_last", reward=ret, terminated=True, truncated=False, policy_version=0, observation_chars=9)
                batch.put_trajectory(TrajectoryRecord(
                    sample_id=sample_id, role="agent", env_id=env_id, skill="Logic", arm=arm, step=0, seed=i, status="completed",
                    failure="", episode_return=ret, turns=[turn], sample=sample(sample_id, env_id, arm, reward=ret), created_at=2.0,
                ))
                if arm == "no_hint":
                    keys.append(trajectory_key(0, sample_id))
        batch.put_batch(BatchRecord(version=0, step=0, checkpoint=True, entries=[BatchEntry(k, 0.0, 0.0) for k in keys]))
        # what a blend run stores: A regret 0.5 -> 0.4 * 1 + 0.6 * plateau(0.5) = 1.0; B 0.0; scale 4 / 2 * 1 = 2
        for env_id, raw, regret, win, advantage in ((ENV_A, 1.0, 0.5, 0.5, 1.0), (ENV_B, 0.0, 0.0, 0.0, -1.0)):
            batch.put_designer_reward(DesignerRewardRecord(
                env_id=env_id, skill="Logic", designer_sample_id=env_id, env_step=0, reward_step=1, variant="blend", regret=regret,
                win_rate=win, raw_reward=raw, advantage=advantage, hint_return=1.0 if env_id == ENV_A else 0.0,
                no_hint_return=0.5 if env_id == ENV_A else 0.0,
            ))
        batch.put_memory(MemoryRecord(env_id=ENV_A, skill="Logic", name="PickEnv", code=CODE, win_rate=0.5, regret=0.5, step=0, source="designed"))
        batch.put_state(RunState(steps_done=1, batches=1, policy_version=1, finished=True))
    store.close()
    row = {"step": 0, "envs_requested": 3, "envs_valid": 2, "win_rate_no_hint": 0.25, "win_rate_hint": 0.5, "mean_regret": 0.25,
           "learnable_share": 0.5, "learnable_share_budget": 0.33, "policy_version": 1, "learner_loss": -0.01, "tokens_per_s": 5.0,
           "vendi_envs_per_n": 0.6, "vendi_memory_per_n": 1.0, "validation_pass_rate": 2 / 3, "formula_reveal_rate": 0.0,
           "reward_levels": 1.5, "partial_reward_levels": 0.0, "staleness": 0.0, "win_rate_by_skill": {"Logic": 0.25}, "embedding": "char-ngram-tf"}
    paths.metrics.write_text(json.dumps(row) + "\n")
    return SmallRun(paths, keys)
