"""Models compared on one probe, episode by episode: win rates, and paired differences with bootstrap intervals.

    comparison = compare(rows, suite_key, [(model_id, "initial"), (model_id, "SPADE"), (model_id, "fixed")],
                         differences=[("SPADE", "initial"), ("fixed", "initial"), ("SPADE", "fixed")])
    print(comparison_markdown(comparison))

`rows` are eval's results (actors/evaluation/results.py). Two models' episodes pair up when both played the same
(dataset, episode): the same environment with the same seed, so the difference removes how hard each instance is.
A difference is the mean over datasets of each dataset's mean paired difference (the table's roll-up, equal
episodes per dataset), and its interval is the percentile bootstrap of that mean with each dataset's pairs resampled
(actors/evaluation/table.py `bootstrap`: 2000 draws, seed 0). Only episodes every compared model played count, so
the rates and the differences are over the same pairs. A hinted arm (`--hinted`, dataset `NAME+hint`) is left out:
the comparison is of the unhinted win rate.
"""

from __future__ import annotations

from collections import defaultdict

from actors.evaluation.table import bootstrap
from engine.protocol.stats import wilson


def _wins(rows: list[dict], suite_key: str, model: str) -> dict[tuple[str, str], float]:
    return {(r["dataset"], r["episode"]): 1.0 if r["win"] else 0.0 for r in rows
            if r["model"] == model and r["suite"] == suite_key and not r["dataset"].endswith("+hint")}


def _by_dataset(values: dict[tuple[str, str], float]) -> list[list[float]]:
    groups: dict[str, list[float]] = defaultdict(list)
    for (dataset, _), value in sorted(values.items()):
        groups[dataset].append(value)
    return list(groups.values())


def _mean_of_means(groups: list[list[float]]) -> float:
    groups = [g for g in groups if g]
    return sum(sum(g) / len(g) for g in groups) / len(groups) if groups else 0.0


def compare(rows: list[dict], suite_key: str, models: list[tuple[str, str]],
            differences: list[tuple[str, str]]) -> dict:
    """Each model's win rate (Wilson interval) and each (a, b) difference a - b with its paired bootstrap interval,
    over the episodes that every model played."""
    wins = {label: _wins(rows, suite_key, model) for model, label in models}
    common = set.intersection(*(set(w) for w in wins.values())) if wins else set()
    out_models = []
    for model, label in models:
        kept = {k: wins[label][k] for k in common}
        rate = _mean_of_means(_by_dataset(kept))
        low, high = wilson(sum(kept.values()), len(kept))
        out_models.append({"label": label, "model": model, "win_rate": rate, "low": low, "high": high,
                           "wins": int(sum(kept.values())), "episodes": len(kept)})
    out_differences = []
    for a, b in differences:
        if a not in wins or b not in wins:
            raise ValueError(f"difference {a} - {b}: both must be among the models ({', '.join(wins)})")
        diffs = {k: wins[a][k] - wins[b][k] for k in common}
        groups = _by_dataset(diffs)
        low, high = bootstrap(groups)
        out_differences.append({"a": a, "b": b, "difference": _mean_of_means(groups), "low": low, "high": high,
                                "pairs": len(diffs), "excludes_zero": low > 0 or high < 0})
    datasets = sorted({d for d, _ in common})
    per_game = []
    for dataset in datasets:
        keys = [k for k in common if k[0] == dataset]
        row = {"dataset": dataset, "episodes": len(keys), "wins": {label: int(sum(wins[label][k] for k in keys)) for label in wins}}
        row["changed"] = {f"{a}-{b}": [sum(1 for k in keys if wins[a][k] > wins[b][k]), sum(1 for k in keys if wins[a][k] < wins[b][k])]
                          for a, b in differences}  # [gained, lost] pairs of a against b
        per_game.append(row)
    return {"suite": suite_key, "datasets": datasets, "episodes_per_model": len(common), "models": out_models,
            "differences": out_differences, "per_game": per_game}


def comparison_markdown(comparison: dict) -> str:
    lines = ["| model | unhinted win rate % [95% Wilson] | wins / episodes |", "|---|---|---|"]
    for m in comparison["models"]:
        lines.append(f"| {m['label']} | {100 * m['win_rate']:.1f} [{100 * m['low']:.1f}, {100 * m['high']:.1f}] | "
                     f"{m['wins']} / {m['episodes']} |")
    lines += ["", "| paired difference | points [95% bootstrap] | pairs | interval excludes 0 |", "|---|---|---|---|"]
    for d in comparison["differences"]:
        lines.append(f"| {d['a']} − {d['b']} | {100 * d['difference']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] | "
                     f"{d['pairs']} | {'yes' if d['excludes_zero'] else 'no'} |")
    lines += ["", f"{len(comparison['datasets'])} environments ({', '.join(comparison['datasets'])}); "
              "pairs: the same environment and seed played by both models"]
    if comparison.get("per_game"):
        labels = [m["label"] for m in comparison["models"]]
        changes = [f"{d['a']}-{d['b']}" for d in comparison["differences"]]  # the keys of each row's `changed`
        lines += ["", "| game | " + " | ".join(f"{label} wins" for label in labels) + " | "
                  + " | ".join(f"{d['a']} − {d['b']} gained / lost" for d in comparison["differences"]) + " |",
                  "|---|" + "---|" * (len(labels) + len(changes))]
        for row in comparison["per_game"]:
            lines.append(f"| {row['dataset']} | " + " | ".join(f"{row['wins'][label]} / {row['episodes']}" for label in labels) + " | "
                         + " | ".join(f"+{row['changed'][c][0]} / −{row['changed'][c][1]}" for c in changes) + " |")
    return "\n".join(lines)
