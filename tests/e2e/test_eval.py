"""End to end: `spade-engine eval` through the real command line, and the RLVE preset through a real `up`.

- rg-hard with the eval-only oracle answerer on a handful of datasets: the table's numbers are the hand-computed
  ones (the oracle wins every episode whose dataset has a reference answer its scorer accepts);
- `up --preset rlve` for 3 steps on the scripted backend (the tiny random model, real learner), with the in-loop
  rg-hard evaluation on: the controller's state is in the run state, eval plays never reach the store or a batch;
- the initial model and the last checkpoint of that run side by side, interrupted by SIGINT (sent to the process
  started here, by pid) and resumed without repeating a finished episode.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage.store import Store

REPO = Path(__file__).resolve().parents[2]


def _env():
    return dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "engine.cli", *args]


def _run(argv, timeout=300) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(argv, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_rg_hard_with_the_oracle_gives_the_hand_computed_table(tiny_model_path, tmp_path):
    datasets = "chain_sum,basic_arithmetic,spell_backward,graph_color,maze,syllogism"
    result = _run(_cli("eval", tiny_model_path, "--suite", "rg-hard", "--backend", "oracle", "--episodes", "2",
                       "--datasets", datasets, "--out", str(tmp_path / "out"), "--json"))
    assert result.returncode == 0, result.stdout + result.stderr
    table = json.loads(result.stdout)
    rates = {row["name"]: row["cells"]["tiny"]["win_rate"] for row in table["rows"]}
    # graph_color has no single reference answer (its scorer checks a colouring), so the oracle cannot win it.
    assert rates == {"math (2)": 1.0, "algorithmic (2)": 0.5, "cognition (1)": 1.0, "logic (1)": 1.0, "overall": 5 / 6}
    assert (tmp_path / "out" / "table.md").read_text().startswith("| win rate % | tiny |")
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and len({(r["model"], r["suite"], r["dataset"], r["episode"]) for r in rows}) == 12


@pytest.fixture(scope="module")
def rlve_run(tiny_model_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rlve")
    script = tmp / "script.json"
    script.write_text(json.dumps({"designer": ["unused"], "hint": ["unused"],
                                  "agent": ["<answer>3</answer>", "It is <answer>7</answer>", "no tags at all"]}))
    run_dir = tmp / "run"
    result = _run(_cli(
        "up", "--no-live", "--preset", "rlve", "--model", tiny_model_path, "--run-dir", str(run_dir), "--steps", "3",
        "--set", "inference.backend=scripted", "--set", f"inference.script={json.dumps(str(script))}",
        "--set", "curriculum.envs_per_step=2", "--set", "run.max_staleness=0", "--set", "learner.learning_rate=1e-3",
        "--set", "play.plays_per_env=2", "--set", "eval.every=2", "--set", "eval.suite=rg-hard", "--set", "eval.datasets=['chain_sum', 'maze']",
        "--set", "eval.episodes=1", "--set", "eval.max_tokens=16",
    ), timeout=480)
    assert result.returncode == 0, result.stdout + result.stderr
    return run_dir


def test_rlve_preset_runs_three_steps_and_keeps_eval_out_of_training(rlve_run):
    metrics = [json.loads(line) for line in (rlve_run / "metrics.jsonl").read_text().splitlines()]
    updates = [m for m in metrics if "step" in m]
    evals = [m for m in metrics if "eval" in m]
    assert [m["step"] for m in updates] == [0, 1, 2] and all(m["plays"] == 4 for m in updates)
    assert [e["eval_policy_version"] for e in evals] == [2, 3]  # every 2 updates, and the final version
    assert all(e["eval"]["episodes"] == 2 and set(e["eval"]["groups"]) == {"math", "cognition"} for e in evals)
    store = Store.open(rlve_run / "store", readonly=True)
    try:
        trajectories = list(store.trajectories())
        assert len(trajectories) == 12 and all(t.env_id.startswith("rlve-s") for t in trajectories)
        assert not any("eval" in entry.trajectory_key for b in store.batches() for entry in b.entries)
        assert sum(len(b.entries) for b in store.batches()) == 12
        state = store.state()
        assert state.finished and state.rlve_counted == 2 and len(state.rlve) == 24
        assert all(window[:2] == [0, 0] for window in state.rlve.values())  # 4 plays a step never reach a 128 window
    finally:
        store.close()
    page = (rlve_run / "report.html").read_text()
    assert "Evaluation (in-loop" in page and "In-loop probe (never trained on)" in page  # the table and its curve


def test_two_checkpoints_side_by_side_resumed_after_sigint(rlve_run, tmp_path):
    out = tmp_path / "out"
    argv = _cli("eval", f"{rlve_run}@initial", str(rlve_run), "--suite", "rg-hard", "--episodes", "3",
                "--datasets", "chain_sum,spell_backward,syllogism", "--max-tokens", "8", "--turns", "1",
                "--concurrency", "1", "--out", str(out))
    results = out / "results.jsonl"
    proc = subprocess.Popen(argv, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if results.is_file() and results.read_text().count("\n") >= 2:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)  # Ctrl-C, to this process only
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, stdout + stderr
    assert "run the same command again to continue" in stderr
    first = [json.loads(line) for line in results.read_text().splitlines()]
    assert 2 <= len(first) < 18
    again = _run(argv, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{len(first)} already in" in again.stderr
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    keys = [(r["model"], r["suite"], r["dataset"], r["episode"]) for r in rows]
    assert len(rows) == 18 and len(set(keys)) == 18  # 2 models x 3 datasets x 3 episodes, none played twice
    assert rows[: len(first)] == first
    header = again.stdout.splitlines()[0]
    assert "run@initial" in header and "run@step-" in header and "Δ" in header
    assert {r["label"] for r in rows} == {"run@initial", next(r["label"] for r in rows if r["label"] != "run@initial")}
