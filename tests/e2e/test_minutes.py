"""`up --minutes N`: a wall-clock budget counted from the first step. No step starts once it is spent; the steps
started finish and train, the final checkpoint and the report are written, and the run is finished."""

from __future__ import annotations

import json

from storage.store import Store
from tests.e2e.scripted_run import up, write_script


def test_a_spent_budget_ends_the_run_after_the_step_in_flight(tiny_model_path, tmp_path):
    run_dir = tmp_path / "run"
    # 0.6 s: spent during step 1's designs, so step 1 is the only one (the second of its refresh epoch never starts)
    result = up(tiny_model_path, run_dir, write_script(tmp_path), None, args=("--minutes", "0.01"),
                sets=("play.plays_per_env=2", "play.hint_plays_per_env=2"))
    assert "time budget of 0.01 min spent: finishing the 1 steps started" in result.stdout, result.stdout[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "envs_requested" in r] == [0]
    assert (run_dir / "report.html").is_file()
    # The final checkpoint is the last update's: step 1's, or, when the cut refresh window's designs were rewarded
    # and flushed (engine/designer_reward.py `close_cut_window`), the flush's, one version later.
    flushed = "are rewarded over those steps, and flushed" in result.stdout
    last = "step-000001" if flushed else "step-000000"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("step-")) == [last], result.stdout[-3000:]
    store = Store.open(run_dir / "store", readonly=True)
    try:
        state = store.state()
    finally:
        store.close()
    assert state.finished and state.steps_done == 1
    config = (run_dir / "config.toml").read_text()
    assert "minutes = 0.01" in config and "steps = 1000000" in config  # no --steps: the budget alone ends the run
