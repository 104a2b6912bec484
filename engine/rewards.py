"""Returns, advantages and the delayed designer reward (spade-reference.md §5-§6).

- Agent advantage: z-score within each (environment, arm) group, (r - mean) / (std + 1e-8); equal groups get 0.
- Designer reward, computed k steps after the environment was made, from the plays of its window:
  `blend` (the reference's paper runs): 0.4 * clip(regret / 0.15, 0, 1) + 0.6 * plateau(win rate), with
  regret = mean hinted return at the refresh step - mean unhinted return at the refresh step ("matched timing")
  and win rate = the mean return of the window's unhinted plays (`reward.win_rate = "mean_return"`, the
  reference) or the share of them with return > 0 ("share_won");
  `regret` (the paper): mean hinted return - mean unhinted return over the whole window;
  `learning_progress` (the paper's learning-potential ablation): |win rate - mu_slow(skill)|, where mu_slow is an
  EMA over refreshes of each skill's mean window win rate, mu <- (1 - g) mu + g w (g = 0.85 on the newest; the
  first value starts it), updated with this window's before it is read, as the reference's delayed mode does.
  An environment with a hung call in its window gets `reward.hang_penalty` instead (the reference: regret only).
  Designer advantage: the reward minus the mean of same-skill designer rewards in the batch, times a scale.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

from engine.protocol.config import RewardConfig


def group_advantages(rewards: Sequence[float]) -> list[float]:
    n = len(rewards)
    if n == 0:
        return []
    average = sum(rewards) / n
    std = math.sqrt(sum((r - average) ** 2 for r in rewards) / n)
    if std < 1e-8:
        return [0.0] * n
    return [(r - average) / (std + 1e-8) for r in rewards]


def plateau(win_rate: float, low: float, high: float, ramp: float) -> float:
    if low <= win_rate <= high:
        return 1.0
    distance = low - win_rate if win_rate < low else win_rate - high
    return max(0.0, 1.0 - distance / ramp)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def win_rate(returns: Sequence[float]) -> float:
    """The share of returns above 0."""
    return mean([1.0 if r > 0 else 0.0 for r in returns])


def window_win_rate(config: RewardConfig, returns: Sequence[float]) -> float:
    """The designer reward's win rate of a window's unhinted returns (`reward.win_rate`)."""
    return mean(returns) if config.win_rate == "mean_return" else win_rate(returns)


def progress_baselines(history: Sequence[tuple[int, str, float]], gamma: float) -> dict[str, float]:
    """mu_slow per skill after (refresh step, skill, window win rate) rows of every window so far, this one's
    included: each refresh feeds the EMA its skill's mean win rate; a skill's first value starts it."""
    by_step: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for step, skill, win in history:
        by_step[step][skill].append(win)
    mu: dict[str, float] = {}
    for step in sorted(by_step):
        for skill, wins in by_step[step].items():
            w = mean(wins)
            mu[skill] = w if skill not in mu else (1.0 - gamma) * mu[skill] + gamma * w
    return mu


def returns_by_group(plays: Iterable) -> dict[tuple[str, str], list[float]]:
    """The returns of the plays that did not fail, by (environment, arm); plays are `PlayResult`s or agent
    `TrajectoryRecord`s (anything with env_id, arm, status and episode_return), in their order."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for play in plays:
        if play.status != "failed":
            groups[(play.env_id, play.arm)].append(play.episode_return)
    return groups


def designer_reward(
    config: RewardConfig,
    *,
    hint_returns_first: Sequence[float],
    no_hint_returns_first: Sequence[float],
    hint_returns_all: Sequence[float],
    no_hint_returns_all: Sequence[float],
    hung: bool = False,
    baseline: float = 0.0,
) -> tuple[float, float, float]:
    """(raw reward, regret, win rate) of one environment over its window; `hung`: a call of it hung in the window;
    `baseline`: learning_progress's mu_slow of its skill."""
    win = window_win_rate(config, no_hint_returns_all)
    if config.designer_reward == "regret":
        regret = mean(hint_returns_all) - mean(no_hint_returns_all)
        raw = regret
    else:
        regret = mean(hint_returns_first) - mean(no_hint_returns_first)
        if config.designer_reward == "blend":
            normalised = min(1.0, max(0.0, regret / config.regret_floor))
            shaped = plateau(win, config.plateau_low, config.plateau_high, config.plateau_ramp)
            raw = config.regret_weight * normalised + config.plateau_weight * shaped
        else:
            raw = abs(win - baseline)
    if hung and (config.designer_reward == "regret" or config.hang_penalty_every_variant):
        raw = config.hang_penalty
    return raw, regret, win


def designer_advantages(skills: Sequence[str], rewards: Sequence[float], scale: float, standardise: bool = False) -> list[float]:
    """Mean-centre within each skill (no std, as the reference) and scale; or z-score within each skill."""
    by_skill: dict[str, list[float]] = defaultdict(list)
    for skill, reward in zip(skills, rewards):
        by_skill[skill].append(reward)
    if standardise:
        z = {skill: iter(group_advantages(values)) for skill, values in by_skill.items()}
        return [next(z[skill]) * scale for skill in skills]
    means = {skill: mean(values) for skill, values in by_skill.items()}
    return [(reward - means[skill]) * scale for skill, reward in zip(skills, rewards)]


def designer_scale(config: RewardConfig, agent_samples: int, designer_samples: int, k: int) -> float:
    if config.designer_scale > 0:
        return config.designer_scale
    if designer_samples == 0:
        return 0.0
    return min(agent_samples / designer_samples * k, 50.0)


def learnable(win_rate: float) -> bool:
    return 0.2 <= win_rate <= 0.8
