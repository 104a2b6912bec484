"""A step's plays: every active environment G times without its hint and H times with it, stored as they come.

    stage = Plays(config, store, retired, say)      # retired: the set engine/refresh.py's Designs shares
    played = await stage.play(step, active, run_tasks, turn, version)   # send, wait for the step's turn, store, retire
    tasks = play_tasks(config, step, active, version)   # PlayTasks, seeded deterministically from the run's seed
    plays = store_plays(store, step, results)       # the PlayResults among the results, stored in one transaction

Hinted plays (`play.hint_plays`): with "refresh" (the reference) only at a refresh step and only for the
environments made there, whose designer reward reads them; with "every_step" for every active environment at
every step. An environment without a hint (its hint calls all failed) gets none: its regret is 0.
Each task carries `version`, the policy version the step's admission waited for, as `min_policy_version`: a
worker loads that version before the play's first turn (actors/worker.py), so no play starts on an older one.
A play that failed because one of its environment's calls hung (`hung`) retires the environment (`retire`, with
`curriculum.retire_hanging_envs`): it leaves the active list and is never reused; the store keeps it valid, its
`reason` saying "retired: ...", so a resumed run knows. The hang also costs its designer the hang penalty
(engine/designer_reward.py).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Awaitable, Callable

import msgspec
import trio

from engine.protocol.config import Config
from engine.curriculum import ActiveEnv
from engine.protocol.messages import PlayResult, PlayTask
from storage.records import TrajectoryRecord
from storage.store import Store


def play_seed(run_seed: int, env_id: str, step: int, arm: str, index: int, group_seeds: str = "distinct") -> int:
    """The reset seed of play `index` of `arm` in `env_id`'s group at `step` (`play.group_seeds`): distinct, one per
    play; shared, one per (environment, step), the same for both arms, so hinted and unhinted plays meet the same
    instance and a group's variance comes from the plays alone."""
    if group_seeds == "shared":
        return zlib.crc32(f"{run_seed}:{env_id}:{step}".encode()) & 0x7FFFFFFF
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


def play_tasks(config: Config, step: int, active: list[ActiveEnv], version: int = 0) -> list[PlayTask]:
    """The play task's id is also the agent sample's id (actors/agent.py); `version` is the oldest policy version
    the plays may start on (the one the step's admission waited for)."""
    p = config.play
    tasks = []
    for env in active:
        for arm, count in (("no_hint", p.plays_per_env), ("hint", hinted_plays(config, step, env))):
            for i in range(count):
                tasks.append(
                    PlayTask(
                        task_id=f"s{step:04d}-{env.env_id}-{arm}-{i:02d}",
                        env_id=env.env_id, skill=env.skill, code=env.code, hint=env.hint if arm == "hint" else "",
                        arm=arm, seed=play_seed(config.run.seed, env.env_id, step, arm, i, p.group_seeds), step=step,
                        setting=config.curriculum.setting, min_policy_version=version,
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


def retired_envs(store: Store) -> set[str]:
    """The environments an earlier step retired (read at start-up, so a resumed run never plays them again)."""
    return {e.env_id for e in store.environments() if e.valid and e.reason.startswith("retired:")}


def retire(store: Store, config: Config, retired: set[str], step: int, plays: list[PlayResult], active: list[ActiveEnv]) -> set[str]:
    """Retire the environments with a hung call among `plays` (`curriculum.retire_hanging_envs`): out of `active`
    (in place) and, through the shared `retired`, of any later reuse; marked in the store. Returns their ids."""
    if not config.curriculum.retire_hanging_envs:
        return set()
    failures = {p.env_id: p.failure for p in plays if hung(p) and p.env_id not in retired}
    records = [r for r in (store.environment(env_id) for env_id in failures) if r is not None]
    with store.batch() as batch:
        for record in records:
            batch.put_environment(msgspec.structs.replace(record, reason=f"retired: a call hung at step {step} ({failures[record.env_id]})"))
    retired |= set(failures)
    active[:] = [e for e in active if e.env_id not in retired]
    return set(failures)


class StepPlays(msgspec.Struct):
    results: list  # every result of the step's play tasks, failed tasks included
    plays: list[PlayResult]

    @property
    def reload_s(self) -> float:
        """The longest wait of a play for its policy version (the step account's worker reload)."""
        return max((r.policy_wait_s for r in self.plays), default=0.0)


class Plays:
    """The plays stage of a step: one call sends its tasks, stores the plays and retires the environments that hung."""

    def __init__(self, config: Config, store: Store, retired: set[str], say: Callable[[str], None]):
        self.config = config
        self.store = store
        self.retired = retired
        self.say = say

    async def play(self, step: int, active: list[ActiveEnv], run_tasks: Callable[[str, list], Awaitable[list]], turn: trio.Event,
                   version: int = 0) -> StepPlays:
        """The tasks go out as soon as the step is admitted (on policy `version` at least); the plays are stored and
        the hung environments retired once `turn` is set (the step before has sent its batch), so the store and
        `active` change in step order."""
        results = await run_tasks(f"step {step + 1}: plays", play_tasks(self.config, step, active, version))
        await turn.wait()
        plays = store_plays(self.store, step, results)
        for env_id in sorted(retire(self.store, self.config, self.retired, step, plays, active)):
            self.say(f"step {step + 1}: environment {env_id} retired: a call hung past sandbox.step_timeout_s")
        return StepPlays(results, plays)
