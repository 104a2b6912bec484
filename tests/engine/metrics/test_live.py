"""The live view: plain lines off a terminal (as before), progress bars per phase on one (rich)."""

from __future__ import annotations

import io
import re

from engine.metrics.live import LiveView

ROW = {"step": 0, "policy_version": 1, "envs_valid": 2, "envs_requested": 3, "active_envs": 3, "win_rate_no_hint": 0.5, "win_rate_hint": 0.75,
       "mean_regret": 0.25, "learnable_share": 0.33, "tokens_per_s": 12.0, "learner_loss": 0.1, "staleness": 0.0, "sandbox": "rlimits",
       "vendi_envs_per_n": 0.8, "formula_reveal_rate": 0.0}


def test_off_a_terminal_only_the_permanent_lines_are_printed():
    out = io.StringIO()
    view = LiveView(3, stream=out, enabled=False)
    view.status("step 1: plays 3/12")
    view.line("worker w0 joined")
    view.step_line(ROW)
    view.close()
    lines = [re.sub(r"^\[\d\d:\d\d\] ", "", line) for line in out.getvalue().splitlines()]
    assert lines == [
        "worker w0 joined",
        "step 1/3  v1  designs 2 valid of 3  envs 3  win 0.50 -> 0.75 with hint  regret +0.25  learnable 0.33  vendi/n 0.80  "
        "reveal 0.00  12 tok/s  loss +0.1000  stale 0.00  sandbox rlimits",
    ]


def test_a_row_without_the_curriculum_metrics_still_prints():
    out = io.StringIO()
    LiveView(3, stream=out, enabled=False).step_line({k: v for k, v in ROW.items() if k not in ("vendi_envs_per_n", "formula_reveal_rate")})
    assert "vendi/n -  " in out.getvalue() and "reveal" not in out.getvalue()


def test_on_a_terminal_each_phase_has_a_bar_with_counts():
    out = io.StringIO()
    view = LiveView(3, stream=out, enabled=True)
    view.status("step 1: designs 2/3")
    view.status("step 1: plays 5/12")
    view.status("step 2: waiting for policy v1 (learner at v0)")
    view.line("worker w0 joined")
    view.step_line(ROW)
    view.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "designs (step 1)" in text and "2/3" in text
    assert "plays (step 1)" in text and "5/12" in text
    assert "learner update (versions)" in text and "0/1" in text
    assert "validation (valid designs)" in text and "pass 67%" in text
    assert "worker w0 joined" in text and "step 2: waiting for policy v1 (learner at v0)" in text
    assert view.live
