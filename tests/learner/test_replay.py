"""learner/replay.py's own checks (the replayed update itself is tests/e2e/test_replay_modes.py): bad input is one line."""

from __future__ import annotations

from learner.replay import main


def test_a_file_that_is_no_batch_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "batches.msgpack"
    bad.write_bytes(b"\x93not it")
    assert main(["--batches", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad} is not a replay batch file") and err.count("\n") == 1


def test_unknown_objectives_and_non_learner_settings_are_refused(tmp_path, capsys):
    assert main(["--batches", str(tmp_path / "x"), "--out", str(tmp_path), "--objective", "sgd"]) == 2
    assert "error: --objective sgd: choose run or one of decoupled_ppo, tis, icepop" in capsys.readouterr().err
    assert main(["--batches", str(tmp_path / "x"), "--out", str(tmp_path), "--set", "reward.regret_floor=1"]) == 2
    assert "error: --set reward.regret_floor=1: replay --train changes only learner.* settings" in capsys.readouterr().err
    assert main(["--batches", str(tmp_path / "missing"), "--out", str(tmp_path)]) == 2
    assert "error: cannot read" in capsys.readouterr().err
