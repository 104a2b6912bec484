"""Returns, advantages and the delayed designer reward (spade-reference.md §5-§6).

- Agent advantage: z-score within each (environment, arm) group, (r - mean) / (std + 1e-8); equal groups get 0.
- Designer reward, computed k steps after the environment was made, from the plays of its window:
  `blend` (the reference's paper runs): 0.4 * clip(regret / 0.15, 0, 1) + 0.6 * plateau(win rate), with
  regret = mean hinted return at the refresh step - mean unhinted return at the refresh step ("matched timing")
  and win rate = share of unhinted plays in the window with return > 0;
  `regret` (the paper): mean hinted return - mean unhinted return over the whole window.
  Designer advantage: the reward minus the mean of same-skill designer rewards in the batch, times a scale.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

from engine.config import RewardConfig


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
) -> tuple[float, float, float]:
    """(raw reward, regret, win rate) of one environment over its window."""
    win = win_rate(no_hint_returns_all)
    if config.designer_reward == "blend":
        regret = mean(hint_returns_first) - mean(no_hint_returns_first)
        normalised = min(1.0, max(0.0, regret / config.regret_floor))
        shaped = plateau(win, config.plateau_low, config.plateau_high, config.plateau_ramp)
        return config.regret_weight * normalised + config.plateau_weight * shaped, regret, win
    regret = mean(hint_returns_all) - mean(no_hint_returns_all)
    return regret, regret, win


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
