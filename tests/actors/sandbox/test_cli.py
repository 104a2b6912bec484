"""The `validate` and `play` entry points the engine's CLI calls."""

import io
import json

import pytest

from actors.environment_cli import play_main, validate_main
from tests.actors.sandbox.sandbox_helpers import GUESS_SOURCE


@pytest.fixture
def guess_file(tmp_path):
    path = tmp_path / "guess.py"
    path.write_text(GUESS_SOURCE)
    return path


def test_validate_prints_every_check_and_returns_zero_when_valid(guess_file, capsys):
    assert validate_main(str(guess_file), as_json=False) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"{guess_file}: VALID (GuessEnv; sandbox ")
    assert "  [pass] solution_wins: solution() won all 3 seeds" in out
    assert "FAIL" not in out


def test_validate_as_json_returns_one_when_invalid(tmp_path, capsys):
    path = tmp_path / "bad.py"
    path.write_text(GUESS_SOURCE.replace("import re\n", "import re\nimport socket\n"))
    assert validate_main(str(path), as_json=True) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert set(verdict) == {"valid", "reason", "checks"}
    assert verdict["valid"] is False and verdict["reason"].startswith("allowed_imports: ")
    assert all(set(c) == {"name", "passed", "detail"} for c in verdict["checks"])


def test_a_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        validate_main(str(tmp_path / "nope.py"), as_json=False)
    with pytest.raises(FileNotFoundError):
        play_main(str(tmp_path / "nope.py"), seed=0, hint=None, actions=[])


def test_play_with_actions_prints_each_turn(guess_file, capsys):
    assert play_main(str(guess_file), seed=4, hint="binary search", actions=["\\boxed{5}", "\\boxed{x}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Guess a number from 1 to 10 in 12 turns.\n\nHINT: binary search\n")
    assert "reward=" in out and "terminated=" in out and "truncated=False" in out


def test_play_reads_actions_from_stdin_until_the_episode_ends(guess_file, capsys, monkeypatch):
    answers = "".join(f"\\boxed{{{n}}}\n" for n in range(1, 11))
    monkeypatch.setattr("sys.stdin", io.StringIO(answers))
    assert play_main(str(guess_file), seed=4, hint=None, actions=[]) == 0
    out = capsys.readouterr().out
    assert out.count("action> ") <= 10 and "Correct!\nreward=1.0 terminated=True truncated=False" in out


def test_play_stops_at_end_of_input(guess_file, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("\\boxed{0}\n"))
    assert play_main(str(guess_file), seed=4, hint=None, actions=[]) == 0
    assert capsys.readouterr().out.count("action> ") == 2


def test_play_reports_a_failing_environment(tmp_path, capsys):
    path = tmp_path / "boom.py"
    path.write_text(GUESS_SOURCE.replace("self.turn += 1", "raise RuntimeError('boom')"))
    assert play_main(str(path), seed=0, hint=None, actions=["\\boxed{1}"]) == 1
    assert "the environment failed (error): " in capsys.readouterr().err


@pytest.mark.parametrize("command", ["validate", "play"])
def test_a_sandbox_that_cannot_start_is_one_line_and_exit_1(guess_file, capsys, monkeypatch, command):
    """Every isolation level fails to start (as on a machine that cannot run the sandbox): one line, no traceback."""
    from actors.sandbox.pool import SandboxPool, SandboxUnavailable
    from engine.cli import main

    async def cannot_start(self, command, wrapped, scratch=False):
        raise SandboxUnavailable("the worker did not start: refused by the test")

    monkeypatch.setattr(SandboxPool, "_spawn", cannot_start)
    assert main([command, str(guess_file), *(["\\boxed{1}"] if command == "play" else [])]) == 1
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1, captured.err
    assert captured.err.startswith("error: no sandbox worker could be started (") and "refused by the test" in captured.err
    assert "Traceback" not in captured.err and captured.out == ""
