"""What a step's plays feed back into the curriculum: the delayed designer rewards and the environment memory.

- `close_window(store, reward, k, end_step, agent_samples_per_step)`: when the plays of step `end_step` are
  stored and the k-step window of the environments made at `end_step + 1 - k` is complete, compute each valid
  designed environment's reward (engine/rewards.py) from the agent returns of its window (an environment with no
  plays at its refresh step, left over from an interrupted refresh, earns none; one without a hint has regret 0;
  one with a hung call in its window gets the hang penalty; learning_progress reads the skill EMAs rebuilt from
  the stored rewards of the earlier windows), centre it per skill,
  store a `DesignerRewardRecord` for each, and return them with the designer samples to train on (due at
  `end_step + 1`).
- `update_memory(store, curriculum, step, active, plays)`: after a refresh step, record each environment made
  at that refresh with the win rate and regret of its plays, then evict past the memory's capacity.
Both write in one LMDB transaction each and read a step's trajectories once.
"""

from __future__ import annotations

from collections import defaultdict

import msgspec

from engine.protocol.config import CurriculumConfig, RewardConfig
from engine.curriculum import ActiveEnv
from engine.protocol.messages import PlayResult, Sample
from engine.plays import hung
from engine.rewards import (
    designer_advantages,
    designer_reward,
    designer_scale,
    mean,
    progress_baselines,
    returns_by_group,
    win_rate,
    window_win_rate,
)
from storage.memory import evicted
from storage.records import DesignerRewardRecord, MemoryRecord
from storage.store import Store


class DesignerReward(msgspec.Struct, frozen=True):
    record: DesignerRewardRecord
    sample: Sample | None  # the designer's sample with its reward and advantage; None when it is not trained


def close_window(store: Store, reward: RewardConfig, k: int, end_step: int, agent_samples_per_step: int) -> list[DesignerReward]:
    """Designer rewards for the environments made at end_step + 1 - k (none unless that was a refresh step)."""
    env_step = end_step + 1 - k
    if env_step < 0 or env_step % k:
        return []
    envs = [e for e in store.environments() if e.source == "designed" and e.valid and e.step_created == env_step]
    if not envs:
        return []
    wanted = {e.env_id for e in envs}
    returns: dict[tuple[str, int, str], list[float]] = defaultdict(list)  # (env, step, arm) -> agent returns
    designer_samples: dict[str, Sample] = {}
    played: set[str] = set()  # environments with plays at their refresh step, failed ones included
    hangs: set[str] = set()  # environments with a hung call in the window
    for step in range(env_step, end_step + 1):
        for t in store.trajectories(step):
            if t.role == "designer" and step == env_step:
                designer_samples[t.sample_id] = t.sample
            elif t.role == "agent" and t.env_id in wanted:
                if step == env_step:
                    played.add(t.env_id)
                if hung(t):
                    hangs.add(t.env_id)
                if t.status != "failed":
                    returns[(t.env_id, step, t.arm)].append(t.episode_return)
    # A valid design that was never played (left over from an interrupted refresh that was redone) earns nothing.
    envs = [e for e in envs if e.env_id in played]
    if not envs:
        return []
    window = range(env_step, end_step + 1)
    baselines = _progress_baselines(store, reward, env_step, envs, returns, window)
    rows = []
    for env in envs:
        first_hint, first_no_hint = returns[(env.env_id, env_step, "hint")], returns[(env.env_id, env_step, "no_hint")]
        hint_all = [x for s in window for x in returns[(env.env_id, s, "hint")]]
        no_hint_all = [x for s in window for x in returns[(env.env_id, s, "no_hint")]]
        if not env.hint:  # every hint call failed: nothing was measured, regret 0 (the reference)
            first_hint, hint_all = first_no_hint, no_hint_all
        raw, regret, win = designer_reward(
            reward, hint_returns_first=first_hint, no_hint_returns_first=first_no_hint, hint_returns_all=hint_all,
            no_hint_returns_all=no_hint_all, hung=env.env_id in hangs, baseline=baselines.get(env.skill, 0.0),
        )
        rows.append((env, raw, regret, win, mean(first_hint), mean(first_no_hint)))
    scale = designer_scale(reward, agent_samples_per_step, len(rows), k)
    advantages = designer_advantages([r[0].skill for r in rows], [r[1] for r in rows], scale, reward.designer_advantage == "standardised")
    out = []
    with store.batch() as batch:
        for (env, raw, regret, win, hint_return, no_hint_return), advantage in zip(rows, advantages):
            record = DesignerRewardRecord(
                env_id=env.env_id, skill=env.skill, designer_sample_id=env.designer_sample_id, env_step=env_step,
                reward_step=env_step + k, variant=reward.designer_reward, regret=regret, win_rate=win,
                raw_reward=raw, advantage=advantage, hint_return=hint_return, no_hint_return=no_hint_return,
            )
            batch.put_designer_reward(record)
            sample = designer_samples.get(env.designer_sample_id)
            if sample is not None and reward.train_designer:
                sample = msgspec.structs.replace(sample, reward=raw, advantage=advantage)
            else:
                sample = None
            out.append(DesignerReward(record, sample))
    return out


def _progress_baselines(store: Store, reward: RewardConfig, env_step: int, envs, returns, window) -> dict[str, float]:
    """learning_progress: mu_slow per skill after this window, from the stored rewards of the earlier windows."""
    if reward.designer_reward != "learning_progress":
        return {}
    history = [(r.env_step, r.skill, r.win_rate) for r in store.designer_rewards() if r.variant == "learning_progress" and r.env_step < env_step]
    for env in envs:
        history.append((env_step, env.skill, window_win_rate(reward, [x for s in window for x in returns[(env.env_id, s, "no_hint")]])))
    return progress_baselines(history, reward.progress_gamma)


def update_memory(store: Store, curriculum: CurriculumConfig, step: int, active: list[ActiveEnv], plays: list[PlayResult]) -> None:
    """Remember the environments made at this refresh with how their plays went; evict past capacity."""
    by_env = returns_by_group(plays)
    with store.batch() as batch:
        for env in active:
            if not env.designed_now:
                continue
            no_hint = by_env.get((env.env_id, "no_hint"), [])
            hint = by_env.get((env.env_id, "hint"), no_hint)  # no hinted plays (no hint): regret 0
            batch.put_memory(
                MemoryRecord(
                    env_id=env.env_id, skill=env.skill, name=env.class_name, code=env.code[: curriculum.example_code_chars],
                    win_rate=win_rate(no_hint), regret=mean(hint) - mean(no_hint),
                    step=step, source="designed", setting=curriculum.setting,
                )
            )
    drop = evicted(list(store.memory()), curriculum.memory_capacity)
    if drop:
        with store.batch() as batch:
            for env_id in drop:
                batch.delete_memory(env_id)
