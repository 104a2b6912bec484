"""Every benchmark starts (`--help`), and the cheap ones run to their JSON line at a tiny size, so a bench cannot
silently hang or rot again (bin/bench bus once waited forever: its simulated workers' hellos lacked the run's ipc
secret). The benches' figures come from `bin/bench NAME` runs, never from here."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
BENCHES = sorted(p.stem for p in (REPO / "bin" / "benchmarks").glob("*.py") if not p.stem.startswith("_"))


def _bench(name: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run([sys.executable, str(REPO / "bin" / "benchmarks" / f"{name}.py"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _json_line(result: subprocess.CompletedProcess, name: str) -> dict:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    line = json.loads(result.stdout.strip().splitlines()[-1])
    assert line["bench"] == name and line["ratio"] > 0 and "target" in line
    return line


def test_every_bench_is_listed():
    assert BENCHES == ["async", "bus", "eval", "inference", "learner", "learning", "sandbox"]


@pytest.mark.parametrize("name", BENCHES)
def test_every_bench_says_what_it_measures(name):
    result = _bench(name, "--help", timeout=120)
    assert result.returncode == 0 and result.stdout.startswith("usage:"), result.stderr[-2000:]


def test_the_bus_bench_runs_to_its_line_at_a_tiny_size():
    line = _json_line(_bench("bus", "--workers", "1", "--steps", "1", "--tasks", "4", "--rounds", "1", timeout=300), "bus")
    assert line["results"] == 4 and line["engine_rejected_results"] == 0 and line["settings"] == []  # the checks on
    assert line["engine_store_us_per_result"] > 0 and line["raw_commit_us_per_result"] > 0


def test_the_learner_bench_runs_to_its_line_at_a_tiny_size():
    _json_line(_bench("learner", "--hidden", "32", "--layers", "1", "--rows", "2", "--length", "16", "--rounds", "1", timeout=300), "learner")
