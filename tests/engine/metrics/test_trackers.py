"""TensorBoard and W&B logging: off by default, lazily imported, by step and by policy version, and a note (not a
failure) when the package is missing."""

from __future__ import annotations

import sys
import types

import pytest

from engine.protocol.config_loading import load_config
from engine.protocol.paths import RunPaths
from engine.metrics.trackers import close_trackers, log_to_trackers, scalars

ROW = {"step": 2, "policy_version": 5, "win_rate_no_hint": 0.5, "refresh": True, "sandbox": "rlimits", "learner": {"loss": 0.1},
       "win_rate_by_skill": {"Logic": 0.25}, "parse_rules": {"boxed_last": 3}, "formula_reveal_examples": ["a"], "time": 1.0}


def test_scalars_flatten_numbers_and_skip_text():
    assert scalars(ROW) == {"step": 2.0, "policy_version": 5.0, "win_rate_no_hint": 0.5, "refresh": 1.0, "learner/loss": 0.1,
                            "win_rate_by_skill/Logic": 0.25, "parse_rules/boxed_last": 3.0}


def test_off_by_default_nothing_is_imported(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # an import would raise
    log_to_trackers(load_config(), RunPaths(tmp_path), ROW)


def test_tensorboard_logs_by_step_and_by_version(tmp_path, monkeypatch):
    calls = []

    class Writer:
        def __init__(self, logdir):
            calls.append(("open", logdir))

        def add_scalar(self, tag, value, step):
            calls.append((tag, value, step))

        def flush(self):
            pass

        def close(self):
            calls.append(("close",))

    monkeypatch.setitem(sys.modules, "tensorboardX", types.SimpleNamespace(SummaryWriter=Writer))
    log_to_trackers(load_config(overrides=["run.tensorboard=true"]), RunPaths(tmp_path), ROW)
    close_trackers()
    assert calls[0] == ("open", str(tmp_path / "tensorboard"))
    assert ("by_step/learner/loss", 0.1, 2) in calls and ("by_version/learner/loss", 0.1, 5) in calls and calls[-1] == ("close",)


def test_wandb_runs_offline_with_both_axes(tmp_path, monkeypatch):
    runs = []

    class Run:
        def __init__(self, **kwargs):
            self.kwargs, self.metrics, self.logged = kwargs, [], []
            runs.append(self)

        def define_metric(self, name, step_metric=None):
            self.metrics.append((name, step_metric))

        def log(self, values):
            self.logged.append(values)

        def finish(self):
            pass

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=lambda **kw: Run(**kw)))
    log_to_trackers(load_config(overrides=["run.wandb=true"]), RunPaths(tmp_path), ROW)
    close_trackers()
    (run,) = runs
    assert run.kwargs["mode"] == "offline" and run.kwargs["dir"] == str(tmp_path)
    assert ("by_version/*", "policy_version") in run.metrics and ("by_step/*", "step") in run.metrics
    assert run.logged[0]["step"] == 2 and run.logged[0]["policy_version"] == 5 and run.logged[0]["by_version/win_rate_no_hint"] == 0.5


def test_a_missing_package_is_a_note(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    log_to_trackers(load_config(overrides=["run.tensorboard=true"]), RunPaths(tmp_path), ROW)
    log_to_trackers(load_config(overrides=["run.tensorboard=true"]), RunPaths(tmp_path), ROW)
    close_trackers()
    err = capsys.readouterr().err
    assert err.count("note: run.tensorboard is on but tensorboardX is not installed (pip install tensorboardX)") == 1


@pytest.fixture(autouse=True)
def _closed():
    yield
    close_trackers()
