"""The paired comparison of models on one probe (actors/evaluation/paired.py)."""

import random

import pytest

from actors.evaluation.paired import compare, comparison_markdown

SUITE = "envs:/probe"


def _rows(model: str, wins: dict[tuple[str, int], bool], suite: str = SUITE) -> list[dict]:
    return [{"model": model, "suite": suite, "dataset": d, "episode": str(e), "win": w} for (d, e), w in wins.items()]


def test_a_uniform_rise_is_found_and_its_interval_excludes_zero():
    rng = random.Random(1)
    base = {(f"env{d}", e): rng.random() < 0.2 for d in range(12) for e in range(32)}
    # the trained model wins every episode the base won, and a further 20 % of the others
    trained = {k: w or rng.random() < 0.2 for k, w in base.items()}
    rows = _rows("a", base) + _rows("b", trained)
    out = compare(rows, SUITE, [("a", "initial"), ("b", "trained")], [("trained", "initial")])
    d = out["differences"][0]
    rise = sum(trained.values()) / 384 - sum(base.values()) / 384
    assert d["difference"] == pytest.approx(rise)
    assert d["pairs"] == 384 and out["episodes_per_model"] == 384
    assert 0 < d["low"] < d["difference"] < d["high"] and d["excludes_zero"]


def test_no_change_gives_an_interval_around_zero():
    rng = random.Random(2)
    a = {(f"env{d}", e): rng.random() < 0.3 for d in range(12) for e in range(32)}
    b = {(f"env{d}", e): rng.random() < 0.3 for d in range(12) for e in range(32)}
    out = compare(_rows("a", a) + _rows("b", b), SUITE, [("a", "x"), ("b", "y")], [("y", "x")])
    d = out["differences"][0]
    assert d["low"] < 0 < d["high"] and not d["excludes_zero"]


def test_only_episodes_both_models_played_count_and_the_hinted_arm_and_other_suites_are_left_out():
    a = {("env0", 0): True, ("env0", 1): False, ("env1", 0): True}
    b = {("env0", 0): True, ("env0", 1): True}  # env1 episode 0 not played yet
    rows = _rows("a", a) + _rows("b", b)
    rows += [{"model": "b", "suite": SUITE, "dataset": "env1+hint", "episode": "0", "win": True},
             {"model": "b", "suite": "envs:/other", "dataset": "env1", "episode": "0", "win": True}]
    out = compare(rows, SUITE, [("a", "x"), ("b", "y")], [("y", "x")])
    assert out["episodes_per_model"] == 2 and out["datasets"] == ["env0"]
    assert [m["win_rate"] for m in out["models"]] == [0.5, 1.0]
    assert out["differences"][0]["difference"] == pytest.approx(0.5)
    text = comparison_markdown(out)
    assert "| y − x | +50.0" in text and "1 / 2" in text


def test_a_difference_of_an_unknown_model_is_refused():
    with pytest.raises(ValueError, match="both must be among the models"):
        compare(_rows("a", {("e", 0): True}), SUITE, [("a", "x")], [("y", "x")])


def test_each_game_counts_its_wins_and_the_pairs_a_model_gained_and_lost():
    a = {("env0", 0): True, ("env0", 1): False, ("env0", 2): False, ("env1", 0): True, ("env1", 1): True}
    b = {("env0", 0): False, ("env0", 1): True, ("env0", 2): True, ("env1", 0): True, ("env1", 1): False}
    out = compare(_rows("a", a) + _rows("b", b), SUITE, [("a", "initial"), ("b", "SPADE")], [("SPADE", "initial")])
    assert out["per_game"] == [
        {"dataset": "env0", "episodes": 3, "wins": {"initial": 1, "SPADE": 2}, "changed": {"SPADE-initial": [2, 1]}},
        {"dataset": "env1", "episodes": 2, "wins": {"initial": 2, "SPADE": 1}, "changed": {"SPADE-initial": [0, 1]}},
    ]
    lines = comparison_markdown(out).splitlines()
    assert lines[-4].startswith("| game | initial wins | SPADE wins | SPADE − initial gained / lost |")
    assert lines[-2:] == ["| env0 | 1 / 3 | 2 / 3 | +2 / −1 |", "| env1 | 2 / 2 | 1 / 2 | +0 / −1 |"]


def test_a_label_with_a_hyphen_keeps_it_in_the_per_game_header():
    a, b = {("env0", 0): True, ("env0", 1): False}, {("env0", 0): False, ("env0", 1): False}
    out = compare(_rows("a", a) + _rows("b", b), SUITE, [("a", "SPADE"), ("b", "copy-bot")], [("SPADE", "copy-bot")])
    header = comparison_markdown(out).splitlines()[-3]
    assert header == "| game | SPADE wins | copy-bot wins | SPADE − copy-bot gained / lost |"
