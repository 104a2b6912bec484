"""`replay --rescore` on a hand-made run: the run's own config reproduces the stored designer rewards; a changed
designer reward gives the numbers worked out by hand; the run itself is not touched."""

from __future__ import annotations

import json

import pytest

from engine.cli import main
from engine.protocol.config_loading import read_config_file
from engine.tools.rescore import rescore
from storage.store import Store

from run_builder import ENV_A, ENV_B


def _rows(small_run, overrides=()):
    config = read_config_file(small_run.paths.config, list(overrides))
    store = Store.open(small_run.paths.store, readonly=True)
    try:
        skipped = []
        return rescore(store, config, skipped), skipped
    finally:
        store.close()


def test_the_runs_own_config_reproduces_the_stored_rewards(small_run):
    rows, skipped = _rows(small_run)
    designers = {r["env_id"]: r for r in rows if r["kind"] == "designer_reward"}
    assert skipped == [] and set(designers) == {ENV_A, ENV_B}
    for r in designers.values():
        assert r["variant"] == "blend" and r["raw_reward"] == pytest.approx(r["stored_raw_reward"]) and r["advantage"] == pytest.approx(r["stored_advantage"])


def test_regret_instead_of_blend_gives_the_hand_computed_numbers(small_run):
    rows, _ = _rows(small_run, ["reward.designer_reward=\"regret\""])
    designers = {r["env_id"]: r for r in rows if r["kind"] == "designer_reward"}
    # A: mean hint 1.0 - mean no hint 0.5 = 0.5; B: 0 - 0 = 0; centred on 0.25, times 4 agent samples / 2 designs * k 1
    assert designers[ENV_A]["raw_reward"] == pytest.approx(0.5) and designers[ENV_A]["regret"] == pytest.approx(0.5)
    assert designers[ENV_B]["raw_reward"] == pytest.approx(0.0)
    assert designers[ENV_A]["scale"] == pytest.approx(2.0)
    assert designers[ENV_A]["advantage"] == pytest.approx(0.5) and designers[ENV_B]["advantage"] == pytest.approx(-0.5)
    assert designers[ENV_A]["stored_raw_reward"] == pytest.approx(1.0)  # the stored blend value beside it
    (step,) = [r for r in rows if r["kind"] == "step"]
    # agent advantages: A's unhinted [0, 1] -> z-scores -1, +1; B's [0, 0] -> 0, 0; hinted plays not trained
    assert sorted((a["env_id"], a["return"], round(a["advantage"], 6)) for a in step["agent_advantages"]) == [
        (ENV_A, 0.0, -1.0), (ENV_A, 1.0, 1.0), (ENV_B, 0.0, 0.0), (ENV_B, 0.0, 0.0)]
    assert step["win_rate_no_hint"] == 0.25 and step["win_rate_hint"] == 0.5 and step["mean_regret"] == pytest.approx(0.25)
    assert step["learnable_share"] == 0.5  # A wins 0.5 of its unhinted plays (learnable), B none


def test_rescore_on_the_command_line_writes_a_file_and_leaves_the_run_alone(small_run, tmp_path, capsys):
    store_bytes = (small_run.paths.store / "data.mdb").read_bytes()
    metrics = small_run.paths.metrics.read_text()
    out = tmp_path / "rescored.jsonl"
    assert main(["replay", str(small_run.paths.root), "--rescore", "--set", "reward.designer_reward=\"regret\"", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{ENV_A}  regret  +0.5000  0.500  0.5000 (1.0000)  +0.5000 (+1.0000)" in printed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["step", "designer_reward", "designer_reward"]
    assert (small_run.paths.store / "data.mdb").read_bytes() == store_bytes and small_run.paths.metrics.read_text() == metrics


def test_rescore_refuses_settings_it_does_not_use(small_run, capsys):
    assert main(["replay", str(small_run.paths.root), "--rescore", "--set", "learner.learning_rate=1"]) == 2
    assert "error: --set learner.learning_rate=1: --rescore recomputes rewards" in capsys.readouterr().err
    assert main(["replay", str(small_run.paths.root), "--steps", "0:1"]) == 2
    assert "error: --steps goes with --train" in capsys.readouterr().err


def test_a_window_the_runs_end_cut_short_is_rescored_over_the_steps_played(small_run):
    """At k = 2 the one step of the run is a cut window; the run rewarded it at step 1 (reward_step 1 < 0 + k), so
    rescore rewards it too, over step 0, with the same raw rewards (the blend reads the refresh step's plays)."""
    rows, _ = _rows(small_run, ["curriculum.refresh_interval=2"])
    designers = {r["env_id"]: r for r in rows if r["kind"] == "designer_reward"}
    assert set(designers) == {ENV_A, ENV_B} and all(r["reward_step"] == 1 for r in designers.values())
    assert designers[ENV_A]["raw_reward"] == pytest.approx(1.0) and designers[ENV_B]["raw_reward"] == pytest.approx(0.0)
    assert designers[ENV_A]["scale"] == pytest.approx(4 / 2 * 2)


def test_a_cut_window_the_run_has_not_rewarded_is_left_out(small_run):
    """A run that stopped inside its window without rewarding it (interrupted: no stored reward before the window's
    end) gets no designer row for that window."""
    import msgspec

    store = Store.open(small_run.paths.store)
    try:
        with store.batch() as batch:
            for r in list(store.designer_rewards()):
                batch.put_designer_reward(msgspec.structs.replace(r, reward_step=2))  # as a whole k = 2 window's
    finally:
        store.close()
    rows, _ = _rows(small_run, ["curriculum.refresh_interval=2"])
    assert [r for r in rows if r["kind"] == "designer_reward"] == []
    assert [r["step"] for r in rows if r["kind"] == "step"] == [0]
