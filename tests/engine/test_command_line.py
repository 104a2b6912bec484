"""The command line: subcommands parse as a user types them."""

from pathlib import Path

import pytest

from engine.cli import main

PICK = str(Path(__file__).parents[1] / "e2e" / "data" / "pick_env.py")


def test_play_takes_actions_after_the_options(capsys):
    assert main(["play", PICK, "--seed", "3", "\\boxed{1}", "\\boxed{2}"]) == 0
    out = capsys.readouterr().out
    assert "reward=" in out and "terminated=True" in out


def test_unknown_option_is_one_line_and_exit_2(capsys):
    assert main(["replay", "/nowhere", "--bogus"]) == 2
    assert capsys.readouterr().err.strip() == "error: unrecognized arguments: --bogus (see spade-engine --help)"


def test_report_of_a_folder_that_is_no_run(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "is not a run directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    "setting, message",
    [
        ("learner.objective.clip_low=1.5", "error: learner.objective.clip_low must be in [0, 1) (got 1.5)"),
        (
            "learner.clip_low=1.5",
            "error: unknown config key learner.clip_low: the objective's settings are in [learner.objective], "
            "e.g. --set learner.objective.clip_low=1.5",
        ),
        ("learner.mini_batches=0", "error: learner.mini_batches must be at least 1 (got 0)"),
    ],
)
def test_bad_learner_setting_fails_up_before_anything_is_written(tmp_path, capsys, setting, message):
    """The whole config (learner included) is checked when `up` builds it: exit 2, one line, no run directory."""
    run_dir = tmp_path / "x"
    assert main(["up", "--set", setting, "--run-dir", str(run_dir)]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [message]
    assert captured.out == ""
    assert not run_dir.exists()
