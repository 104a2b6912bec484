"""Which model a MODEL_OR_RUN_DIR[@NAME] argument names, and the command line's one-line errors."""

from __future__ import annotations

import json

import pytest

from actors.evaluation.cli import EvalInputError, main, resolve_model


def _run_dir(tmp_path, base):
    run = tmp_path / "run"
    (run / "checkpoints" / "step-000004").mkdir(parents=True)
    (run / "checkpoints" / "step-000004" / "config.json").write_text("{}")
    (run / "checkpoints" / "step-000004" / "checkpoint.json").write_text(json.dumps({"version": 4}))
    (run / "checkpoints" / "latest").symlink_to("step-000004")
    (run / "config.toml").write_text("")
    (run / "run.json").write_text(json.dumps({"model_path": str(base)}))
    return run


def test_run_directories_and_model_folders(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    run = _run_dir(tmp_path, base)
    assert resolve_model(str(base), None) == ("base", str(base.resolve()))
    assert resolve_model(f"{run}@initial", None) == ("run@initial", str(base.resolve()))
    assert resolve_model(str(run), None) == ("run@step-000004 (v4)", str((run / "checkpoints" / "step-000004").resolve()))
    assert resolve_model(str(run), "step-000004")[1] == resolve_model(f"{run}@latest", None)[1]
    assert resolve_model(str(run), "initial")[0] == "run@initial"
    with pytest.raises(EvalInputError, match="no checkpoint 'v9'.*known: latest, step-000004"):
        resolve_model(f"{run}@v9", None)
    with pytest.raises(EvalInputError, match="is not a folder"):
        resolve_model(str(tmp_path / "nothing"), None)
    assert resolve_model("default", None, default_model=lambda: str(base))[1] == str(base.resolve())


def test_bad_input_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path), "--suite", "rg-hard", "--datasets", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: --datasets: nope not in the rg-hard suite")
    assert main([str(tmp_path), "--suite", "math", "--backend", "oracle"]) == 2
    assert "neither a run directory" in capsys.readouterr().err
