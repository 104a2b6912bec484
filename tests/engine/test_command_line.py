"""The command line: subcommands parse as a user types them; every failure is reported in one place (main)."""

from pathlib import Path

import pytest

from engine.cli import COMMANDS, main
from engine.protocol.errors import BUG, RunFailed

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


def test_a_bug_prints_its_traceback_and_asks_for_a_report(monkeypatch, capsys):
    def broken(args):
        raise KeyError("missing")

    monkeypatch.setitem(COMMANDS, "report", broken)
    assert main(["report", "/nowhere"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "KeyError: 'missing'" in err
    assert err.rstrip().endswith(BUG)


def test_a_failure_inside_trio_s_exception_group_is_one_line(monkeypatch, capsys):
    def failed(args):
        raise ExceptionGroup("nursery", [RunFailed("the learner failed")])

    monkeypatch.setitem(COMMANDS, "report", failed)
    assert main(["report", "/nowhere"]) == 1
    assert capsys.readouterr().err == "error: the learner failed\n"
