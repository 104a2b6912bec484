"""The designer's delayed reward: each design made at a refresh step is rewarded from the agent plays of its k-step
window, and its designer sample waits in a queue until that reward falls due.

    designer_step(store, config, queue, step, agent_samples, active, plays)   # the loop's call, after each step
    close_cut_window(store, config, queue, last_step, agent_samples)          # and after the last one
    due = queue.pop(step)               # the designer samples that join step's training batch
    queue.restore(store, state, train)  # after a crash: the samples due at the next step

- `score_window(...)`: PURE: the rewards of one window's designs from plain inputs (the designs, the window's
  agent plays, the earlier windows' win rates for learning progress, the agent sample count); the live path
  (`close_window`) and the rescore (engine/tools/rescore.py) both call it. An environment with no plays at its
  refresh step, left over from an interrupted refresh, earns none; one without a hint has regret 0; one with a hung
  call in its window gets the hang penalty; learning_progress reads the skill EMAs of the earlier windows.
  Rewards are centred per skill (engine/rewards.py).
- `close_window(store, reward, k, end_step, agent_samples_per_step)`: when the plays of step `end_step` are stored
  and the window of the environments made at `end_step + 1 - k` is complete, score it, store a
  `DesignerRewardRecord` for each design, and return them with the designer samples to train on (due at
  `end_step + 1`).
- `update_memory(store, curriculum, step, active, plays)`: after a refresh step, record each environment made
  at that refresh with the win rate and regret of its plays, then evict past the memory's capacity.
- `close_cut_window(store, config, queue, last_step, agent_samples)`: at the run's end, when it stopped inside the
  last refresh's window, reward those designs over the steps played (a record with reward_step = last_step + 1,
  before env_step + k) and queue them for the final flush.
The reference flushes the samples whose reward falls due after the last step in one more batch (`pop(steps)`); it
computes a designer reward when the sample trains, from the plays buffered by then, so a window the last rollout
cut short is rewarded over what was played, as `close_cut_window` does.
"""

from __future__ import annotations

from collections import defaultdict

import msgspec

from engine.curriculum import ActiveEnv
from engine.plays import hung
from engine.protocol.config import Config, CurriculumConfig, RewardConfig
from engine.protocol.messages import PlayResult, Sample
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
from storage.records import DesignerRewardRecord, EnvironmentRecord, MemoryRecord, RunState
from storage.store import Store, trajectory_key

History = list[tuple[int, str, float]]  # (refresh step, skill, window win rate) of scored designs: learning progress's EMA


class ScoredDesign(msgspec.Struct, frozen=True):
    env: EnvironmentRecord
    raw_reward: float
    regret: float
    win_rate: float
    hint_return: float  # mean hinted return at the refresh step
    no_hint_return: float
    advantage: float


class WindowScore(msgspec.Struct, frozen=True):
    designs: list[ScoredDesign]
    scale: float
    history: History  # this window's entries, for the learning progress of the windows after it


def score_window(reward: RewardConfig, k: int, env_step: int, envs: list[EnvironmentRecord], plays: dict[int, list],
                 earlier: History, agent_samples: int) -> WindowScore:
    """The rewards of the valid designs `envs` made at `env_step`, from `plays` (step -> the agent plays, objects with
    env_id, arm, status, failure and episode_return, of the steps env_step .. env_step + k - 1) and `earlier` (the
    history of the windows before, read only by learning_progress)."""
    window = range(env_step, env_step + k)
    played = {p.env_id for p in plays.get(env_step, ())}  # failed plays count: the design was played
    envs = [e for e in envs if e.env_id in played]
    if not envs:
        return WindowScore([], 0.0, [])
    wanted = {e.env_id for e in envs}
    returns: dict[tuple[str, int, str], list[float]] = defaultdict(list)  # (env, step, arm) -> agent returns
    hangs: set[str] = set()  # environments with a hung call in the window
    for step in window:
        for p in plays.get(step, ()):
            if p.env_id not in wanted:
                continue
            if hung(p):
                hangs.add(p.env_id)
            if p.status != "failed":
                returns[(p.env_id, step, p.arm)].append(p.episode_return)

    def arm(env_id: str, name: str, steps) -> list[float]:
        return [x for s in steps for x in returns[(env_id, s, name)]]

    history = [(env_step, e.skill, window_win_rate(reward, arm(e.env_id, "no_hint", window))) for e in envs]
    baselines = progress_baselines(earlier + history, reward.progress_gamma) if reward.designer_reward == "learning_progress" else {}
    rows = []
    for env in envs:
        first_hint, first_no_hint = arm(env.env_id, "hint", [env_step]), arm(env.env_id, "no_hint", [env_step])
        hint_all, no_hint_all = arm(env.env_id, "hint", window), arm(env.env_id, "no_hint", window)
        if not env.hint:  # every hint call failed: nothing was measured, regret 0 (the reference)
            first_hint, hint_all = first_no_hint, no_hint_all
        raw, regret, win = designer_reward(
            reward, hint_returns_first=first_hint, no_hint_returns_first=first_no_hint, hint_returns_all=hint_all,
            no_hint_returns_all=no_hint_all, hung=env.env_id in hangs, baseline=baselines.get(env.skill, 0.0),
        )
        rows.append((env, raw, regret, win, mean(first_hint), mean(first_no_hint)))
    scale = designer_scale(reward, agent_samples, len(rows), k)
    advantages = designer_advantages([r[0].skill for r in rows], [r[1] for r in rows], scale, reward.designer_advantage == "standardised")
    designs = [ScoredDesign(*row, advantage=a) for row, a in zip(rows, advantages)]
    return WindowScore(designs, scale, history)


class DesignerReward(msgspec.Struct, frozen=True):
    record: DesignerRewardRecord
    sample: Sample | None  # the designer's sample with its reward and advantage; None when it is not trained


def close_window(store: Store, reward: RewardConfig, k: int, end_step: int, agent_samples_per_step: int, *,
                 cut: bool = False) -> list[DesignerReward]:
    """Designer rewards for the environments made at end_step + 1 - k (none unless that was a refresh step), due at
    end_step + 1. With `cut` (the run's last step): those made at the last refresh at or before end_step, over the
    steps of their window played by then (none when that window is whole: it closed at end_step already)."""
    env_step = end_step - end_step % k if cut else end_step + 1 - k
    if env_step < 0 or env_step % k or (cut and env_step + k - 1 == end_step):
        return []
    envs = [e for e in store.environments() if e.source == "designed" and e.valid and e.step_created == env_step]
    # A design rewarded by a cut window (reward_step before env_step + k) is in the final flush, or queued for it
    # (DesignerQueue.restore): an extended run (`--resume --steps N`) must not reward and train it again.
    if envs:
        early = {r.env_id for r in store.designer_rewards() if r.env_step == env_step and r.reward_step < env_step + k}
        envs = [e for e in envs if e.env_id not in early]
    if not envs:
        return []
    plays: dict[int, list] = defaultdict(list)
    designer_samples: dict[str, Sample] = {}
    for step in range(env_step, end_step + 1):  # a step's trajectories are read once
        for t in store.trajectories(step):
            if t.role == "designer" and step == env_step:
                designer_samples[t.sample_id] = t.sample
            elif t.role == "agent":
                plays[step].append(t)
    earlier = []
    if reward.designer_reward == "learning_progress":
        earlier = [(r.env_step, r.skill, r.win_rate) for r in store.designer_rewards() if r.variant == "learning_progress" and r.env_step < env_step]
    out = []
    with store.batch() as batch:
        for d in score_window(reward, k, env_step, envs, plays, earlier, agent_samples_per_step).designs:
            env = d.env
            record = DesignerRewardRecord(
                env_id=env.env_id, skill=env.skill, designer_sample_id=env.designer_sample_id, env_step=env_step,
                reward_step=end_step + 1, variant=reward.designer_reward, regret=d.regret, win_rate=d.win_rate,
                raw_reward=d.raw_reward, advantage=d.advantage, hint_return=d.hint_return, no_hint_return=d.no_hint_return,
            )
            batch.put_designer_reward(record)
            sample = designer_samples.get(env.designer_sample_id)
            if sample is not None and reward.train_designer:
                sample = msgspec.structs.replace(sample, reward=d.raw_reward, advantage=d.advantage)
            else:
                sample = None
            out.append(DesignerReward(record, sample))
    return out


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


class DesignerQueue:
    """The designer samples by the step their reward falls due at."""

    def __init__(self):
        self.due: dict[int, list[Sample]] = defaultdict(list)

    def add(self, rewards: list[DesignerReward]) -> None:
        for reward in rewards:
            if reward.sample is not None:
                self.due[reward.record.reward_step].append(reward.sample)

    def pop(self, step: int) -> list[Sample]:
        return self.due.pop(step, [])

    def waiting(self, step: int) -> bool:
        """Whether samples are due at `step`."""
        return bool(self.due.get(step))

    def restore(self, store: Store, state: RunState, train_designer: bool) -> None:
        """The samples due at the next step (state.steps_done): their window closed at the last committed step and
        they are in no batch yet. A reward due later was computed by a step that is not committed; that step is
        played again and recomputes it."""
        if not train_designer:
            return
        trained = {entry.trajectory_key for record in store.batches() for entry in record.entries}
        for reward in store.designer_rewards():
            key = trajectory_key(reward.env_step, reward.designer_sample_id)
            if reward.reward_step == state.steps_done and key not in trained:
                trajectory = store.trajectory(key)
                if trajectory is not None:
                    self.due[reward.reward_step].append(msgspec.structs.replace(trajectory.sample, reward=reward.raw_reward, advantage=reward.advantage))


def close_cut_window(store: Store, config: Config, queue: DesignerQueue, last_step: int, agent_samples: int) -> int:
    """At the run's end, `last_step` its final step: when the run stopped inside the last refresh's window
    (`run.steps` not a multiple of k, or the time budget), reward those designs over the steps played and queue
    their samples for the final flush (due at last_step + 1), as the reference's final rollout flushes its buffer.
    Returns how many designs were rewarded (0 when the window was whole)."""
    rewards = close_window(store, config.reward, config.curriculum.refresh_interval, last_step, agent_samples, cut=True)
    queue.add(rewards)
    return len(rewards)


def designer_step(store: Store, config: Config, queue: DesignerQueue, step: int, agent_samples: int,
                  active: list[ActiveEnv], plays: list[PlayResult]) -> None:
    """The designer reward stage of a step: close the window ending at it (its rewards queued, due at step + 1) and,
    after a refresh step, update the environment memory."""
    k = config.curriculum.refresh_interval
    queue.add(close_window(store, config.reward, k, step, agent_samples))
    if step % k == 0:
        update_memory(store, config.curriculum, step, active, plays)
