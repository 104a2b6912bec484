"""The command line: subcommands parse as a user types them."""

from pathlib import Path

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
