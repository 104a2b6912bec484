"""Rewards and advantages: group z-scores, the designer's blended reward, regret, learning progress and the hang
penalty."""

import math

import pytest

from engine.protocol.config import RewardConfig
from engine.rewards import designer_advantages, designer_reward, designer_scale, group_advantages, plateau


def test_group_advantages_z_score_and_zero_variance():
    adv = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert adv == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-6)
    assert group_advantages([0.5, 0.5]) == [0.0, 0.0]


def test_plateau():
    assert plateau(0.5, 0.4, 0.6, 0.25) == 1.0
    assert plateau(0.2, 0.4, 0.6, 0.25) == pytest.approx(1 - 0.2 / 0.25)
    assert plateau(1.0, 0.4, 0.6, 0.25) == 0.0


def test_blend_reward_by_hand():
    # regret at the refresh step: 1.0 - 0.5 = 0.5 -> clip(0.5/0.15) = 1; win rate over the window 2/4 = 0.5 -> plateau 1
    raw, regret, win = designer_reward(
        RewardConfig(),
        hint_returns_first=[1.0, 1.0],
        no_hint_returns_first=[1.0, 0.0],
        hint_returns_all=[1.0, 1.0, 0.0, 0.0],
        no_hint_returns_all=[1.0, 0.0, 1.0, 0.0],
    )
    assert (raw, regret, win) == pytest.approx((1.0, 0.5, 0.5))


def test_pure_regret_uses_whole_window():
    raw, regret, win = designer_reward(
        RewardConfig(designer_reward="regret"),
        hint_returns_first=[1.0],
        no_hint_returns_first=[0.0],
        hint_returns_all=[1.0, 0.0],
        no_hint_returns_all=[0.0, 0.0],
    )
    assert raw == regret == pytest.approx(0.5) and win == 0.0


def test_designer_advantages_mean_centred_per_skill():
    adv = designer_advantages(["a", "a", "b"], [1.0, 0.0, 0.3], scale=2.0)
    assert adv == pytest.approx([1.0, -1.0, 0.0])
    assert designer_scale(RewardConfig(), agent_samples=192, designer_samples=24, k=4) == 32
    assert designer_scale(RewardConfig(), agent_samples=192, designer_samples=2, k=8) == 50
    assert not math.isnan(designer_scale(RewardConfig(), 0, 0, 4))
    assert designer_advantages(["a", "a", "b"], [1.0, 0.0, 0.3], scale=1.0, standardise=True) == pytest.approx([1.0, -1.0, 0.0])


def test_blend_win_rate_with_partial_returns_is_the_mean_return():
    """The reference: win rate = mean of every unhinted return in the window, partial progress counting partly."""
    returns = dict(hint_returns_first=[1.0, 0.5], no_hint_returns_first=[0.5, 0.25], hint_returns_all=[1.0, 0.5],
                   no_hint_returns_all=[0.5, 0.25, 0.75, 0.0, 1.0, 0.0, 0.25, 0.25])
    raw, regret, win = designer_reward(RewardConfig(), **returns)
    # win = 3.0 / 8 = 0.375: plateau 1 - (0.4 - 0.375) / 0.25 = 0.9; regret 0.75 - 0.375 = 0.375 -> clip(2.5) = 1
    assert (win, regret) == pytest.approx((0.375, 0.375))
    assert raw == pytest.approx(0.4 * 1.0 + 0.6 * 0.9)
    raw, _, win = designer_reward(RewardConfig(win_rate="share_won"), **returns)  # the project's first way: 6 of 8 > 0
    assert win == pytest.approx(0.75) and raw == pytest.approx(0.4 + 0.6 * (1 - 0.15 / 0.25))


def test_learning_progress_is_the_distance_to_the_skills_slow_ema():
    from engine.rewards import progress_baselines

    # refresh 0: skill A wins 0.2 and 0.6 (mean 0.4 starts the EMA); refresh 4: mean 0.8 -> 0.15 * 0.4 + 0.85 * 0.8
    history = [(0, "A", 0.2), (0, "A", 0.6), (0, "B", 0.5), (4, "A", 0.8)]
    mu = progress_baselines(history, gamma=0.85)
    assert mu == pytest.approx({"A": 0.15 * 0.4 + 0.85 * 0.8, "B": 0.5})
    raw, _, win = designer_reward(
        RewardConfig(designer_reward="learning_progress"), hint_returns_first=[1.0], no_hint_returns_first=[0.0],
        hint_returns_all=[1.0], no_hint_returns_all=[1.0, 0.5], baseline=mu["A"],
    )
    assert win == 0.75 and raw == pytest.approx(abs(0.75 - mu["A"]))


def test_a_hung_environment_gets_the_hang_penalty():
    returns = dict(hint_returns_first=[1.0], no_hint_returns_first=[0.0], hint_returns_all=[1.0], no_hint_returns_all=[0.0])
    assert designer_reward(RewardConfig(designer_reward="regret"), hung=True, **returns)[0] == -0.5
    assert designer_reward(RewardConfig(), hung=True, **returns)[0] == -0.5  # the default: every variant
    reference_blend = RewardConfig(hang_penalty_every_variant=False)  # the reference's blend ignores the flag
    assert designer_reward(reference_blend, hung=True, **returns)[0] == designer_reward(reference_blend, **returns)[0]
