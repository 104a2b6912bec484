"""A step's plays: every active environment G times without its hint and H times with it, stored as they come.

    tasks = play_tasks(config, step, active)        # PlayTasks, seeded deterministically from the run's seed
    plays = store_plays(store, step, results)       # the PlayResults among the results, stored in one transaction

Hinted plays (`play.hint_plays`): with "refresh" (the reference) only at a refresh step and only for the
environments made there, whose designer reward reads them; with "every_step" for every active environment at
every step. An environment without a hint (its hint calls all failed) gets none: its regret is 0.
A play that failed because one of its environment's calls hung (`hung`) retires the environment
(`curriculum.retire_hanging_envs`, engine/refresh.py) and costs its designer the hang penalty (engine/feedback.py).
"""

from __future__ import annotations

import time
import zlib

from engine.protocol.config import Config
from engine.curriculum import ActiveEnv
from engine.protocol.messages import PlayResult, PlayTask
from storage.records import TrajectoryRecord
from storage.store import Store


def play_seed(run_seed: int, env_id: str, step: int, arm: str, index: int) -> int:
    return zlib.crc32(f"{run_seed}:{env_id}:{step}:{arm}:{index}".encode()) & 0x7FFFFFFF


# How the sandbox words a reset/step call that ran past sandbox.step_timeout_s (the episode's own wall-clock limit,
# which includes waiting for the model, is not the environment's fault and reads "the episode took longer").
HANG_FAILURE = "timeout: the call took longer"


def hung(play) -> bool:
    """Whether a play (a `PlayResult` or an agent `TrajectoryRecord`) failed on a hung environment call."""
    return play.status == "failed" and play.failure.startswith(HANG_FAILURE)


def hinted_plays(config: Config, step: int, env: ActiveEnv) -> int:
    """How many hinted plays `env` gets at `step`."""
    p = config.play
    if not env.hint:
        return 0
    if p.hint_plays == "every_step":
        return p.hint_plays_per_env
    refresh = step % config.curriculum.refresh_interval == 0
    return p.hint_plays_per_env if refresh and env.designed_now else 0


def play_tasks(config: Config, step: int, active: list[ActiveEnv]) -> list[PlayTask]:
    """The play task's id is also the agent sample's id (actors/agent.py)."""
    p = config.play
    tasks = []
    for env in active:
        for arm, count in (("no_hint", p.plays_per_env), ("hint", hinted_plays(config, step, env))):
            for i in range(count):
                tasks.append(
                    PlayTask(
                        task_id=f"s{step:04d}-{env.env_id}-{arm}-{i:02d}",
                        env_id=env.env_id, skill=env.skill, code=env.code, hint=env.hint if arm == "hint" else "",
                        arm=arm, seed=play_seed(config.run.seed, env.env_id, step, arm, i), step=step,
                        setting=config.curriculum.setting,
                    )
                )
    return tasks


def store_plays(store: Store, step: int, results: list) -> list[PlayResult]:
    plays = [r for r in results if isinstance(r, PlayResult)]
    with store.batch() as batch:
        for r in plays:
            batch.put_trajectory(
                TrajectoryRecord(
                    sample_id=r.agent.sample_id, role="agent", env_id=r.env_id, skill=r.agent.skill, arm=r.arm, step=step,
                    seed=r.seed, status=r.status, failure=r.failure, episode_return=r.episode_return, turns=r.turns,
                    sample=r.agent, created_at=time.time(),
                )
            )
    return plays
