import math

import pytest

from engine.config import RewardConfig
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
