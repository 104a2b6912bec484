"""The side-by-side table: Wilson and bootstrap intervals, family averages, the delta column, resumable results."""

from __future__ import annotations

import json

import pytest

from actors.evaluation.results import ResultsFile
from actors.evaluation.suites import load_suite
from actors.evaluation.table import bootstrap, build_table, markdown
from engine.protocol.stats import wilson


def test_wilson_known_values():
    assert wilson(0, 0) == (0.0, 0.0)
    low, high = wilson(8, 10)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)
    low, high = wilson(0, 5)
    assert low == 0.0 and round(high, 4) == 0.4345


def test_bootstrap_is_deterministic_and_brackets_the_mean():
    groups = [[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]]
    assert bootstrap(groups) == bootstrap(groups)
    low, high = bootstrap(groups)
    assert low <= 0.5 <= high and bootstrap([[1.0, 1.0]]) == (1.0, 1.0)


def test_family_rows_are_means_of_dataset_rates_and_models_sit_side_by_side():
    suite = load_suite("rg-hard", episodes=2, datasets=["chain_sum", "gcd", "maze"])
    rows = []
    for model, wins in (("base", {"chain_sum": [1, 0], "gcd": [0, 0], "maze": [0, 0]}),
                        ("trained", {"chain_sum": [1, 1], "gcd": [1, 0], "maze": [1, 0]})):
        for dataset, outcome in wins.items():
            family = "math" if dataset != "maze" else "cognition"
            rows += [{"model": model, "dataset": dataset, "family": family, "episode": str(i), "win": bool(w)} for i, w in enumerate(outcome)]
    table = build_table(rows, models=[("base", "base"), ("trained", "trained")], suite=suite, per_dataset=True)
    by_name = {r["name"]: r for r in table["rows"]}
    assert [r["name"] for r in table["rows"][:5]] == ["math (2)", "algorithmic (0)", "cognition (1)", "logic (0)", "overall"]
    assert by_name["math (2)"]["cells"]["trained"]["win_rate"] == pytest.approx(0.75)
    assert by_name["math (2)"]["delta"] == pytest.approx(0.5)
    assert by_name["logic (0)"]["cells"]["base"]["win_rate"] is None
    assert by_name["overall"]["cells"]["trained"]["episodes"] == 6
    text = markdown(table)
    assert "| **math (2)** | 25.0 [" in text and "+50.0" in text and "| gcd |" in text
    json.dumps(table)


def test_results_file_skips_a_cut_line_and_resumes(tmp_path):
    path = tmp_path / "results.jsonl"
    results = ResultsFile(path)
    results.add({"model": "m", "suite": "s", "dataset": "d", "episode": "0", "win": True})
    results.close()
    with open(path, "a") as f:
        f.write('{"model": "m", "suite": "s", "datas')  # a crash mid-line
    again = ResultsFile(path)
    assert again.done(("m", "s", "d", "0")) and not again.done(("m", "s", "d", "1"))
    again.add({"model": "m", "suite": "s", "dataset": "d", "episode": "1", "win": False})
    again.close()
    assert len(ResultsFile(path).rows) == 2
