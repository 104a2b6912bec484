"""The results table: models side by side (base against trained), win rates with 95% confidence intervals.

    table = build_table(rows, models=[(model_id, label), ...], suite=suite, ci="wilson", per_dataset=False)
    print(markdown(table)); json.dumps(table)

Rows: one per family (rg-hard: math, algorithmic, cognition, logic, always listed), then `overall`, then one per
dataset with `per_dataset` (always when the suite has a single family, e.g. a math file). A family's win rate is
the mean of its datasets' win rates (the paper's roll-up; with equal episodes per dataset it is the pooled rate).
Intervals: `wilson` (the Wilson score interval of the pooled wins over episodes) or `bootstrap` (percentile
interval of the family mean when each dataset's episodes are resampled, 2000 times, seed 0). The last column is
the last model minus the first, in points.
"""

from __future__ import annotations

import random
from collections import defaultdict

from engine.protocol.stats import wilson

BOOTSTRAP_DRAWS = 2000


def bootstrap(groups: list[list[float]], draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the mean of group means, each group's outcomes resampled with replacement."""
    groups = [g for g in groups if g]
    if not groups:
        return 0.0, 0.0
    rng = random.Random(seed)
    means = sorted(
        sum(sum(rng.choices(g, k=len(g))) / len(g) for g in groups) / len(groups) for _ in range(draws)
    )
    return means[int(0.025 * draws)], means[min(draws - 1, int(0.975 * draws))]


def _cell(by_dataset: dict[str, list[float]], ci: str) -> dict:
    groups = [v for v in by_dataset.values() if v]
    n = sum(len(g) for g in groups)
    if not n:
        return {"win_rate": None, "low": None, "high": None, "wins": 0, "episodes": 0, "datasets": 0}
    rate = sum(sum(g) / len(g) for g in groups) / len(groups)
    wins = sum(sum(g) for g in groups)
    low, high = wilson(wins, n) if ci == "wilson" else bootstrap(groups)
    return {"win_rate": rate, "low": low, "high": high, "wins": wins, "episodes": n, "datasets": len(groups)}


def build_table(rows: list[dict], *, models: list[tuple[str, str]], suite, ci: str = "wilson", per_dataset: bool = False) -> dict:
    wins: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    family_of: dict[str, str] = {}
    for row in rows:
        wins[row["model"]][row["family"]][row["dataset"]].append(1.0 if row["win"] else 0.0)
        family_of[row["dataset"]] = row["family"]
    for item in suite.items:
        family_of.setdefault(item.dataset, item.family)
    labels = [label for _, label in models]
    out_rows = []

    def add(name: str, kind: str, pick) -> None:
        out_rows.append({"name": name, "kind": kind, "cells": {label: _cell(pick(model), ci) for model, label in models}})

    families = list(suite.families) + sorted({f for f in family_of.values()} - set(suite.families))
    for family in families:
        count = len({d for d, f in family_of.items() if f == family})
        add(f"{family} ({count})", "family", lambda m, f=family: wins[m][f])
    add("overall", "overall", lambda m: {d: v for fam in wins[m].values() for d, v in fam.items()})
    if per_dataset or len(families) == 1:
        for dataset in sorted(family_of, key=lambda d: (family_of[d], d)):
            add(dataset, "dataset", lambda m, d=dataset: {d: wins[m][family_of[d]][d]})
    for row in out_rows:
        first, last = row["cells"][labels[0]], row["cells"][labels[-1]]
        both = len(labels) > 1 and first["win_rate"] is not None and last["win_rate"] is not None
        row["delta"] = (last["win_rate"] - first["win_rate"]) if both else None
    return {
        "suite": suite.key, "models": labels, "model_ids": [m for m, _ in models], "ci": f"{ci} 95%",
        "settings": {"episodes": suite.settings.episodes, "max_turns": suite.settings.max_turns,
                     "max_tokens": suite.settings.max_tokens, "temperature": suite.settings.temperature},
        "rows": out_rows,
    }


def _fmt(cell: dict) -> str:
    if cell["win_rate"] is None:
        return "–"
    return f"{100 * cell['win_rate']:.1f} [{100 * cell['low']:.1f}, {100 * cell['high']:.1f}] (n={cell['episodes']})"


def markdown(table: dict) -> str:
    labels = table["models"]
    delta = len(labels) > 1
    head = ["win rate %", *labels] + ([f"Δ {labels[-1]} − {labels[0]}"] if delta else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table["rows"]:
        name = f"**{row['name']}**" if row["kind"] != "dataset" else row["name"]
        cells = [_fmt(row["cells"][label]) for label in labels]
        if delta:
            cells.append("–" if row["delta"] is None else f"{100 * row['delta']:+.1f}")
        lines.append("| " + " | ".join([name, *cells]) + " |")
    s = table["settings"]
    lines.append("")
    lines.append(f"{table['suite']}: {s['episodes']} episodes per dataset, {s['max_turns']} turns, temperature "
                 f"{s['temperature']:g}, {s['max_tokens']} tokens a turn; {table['ci']} intervals")
    return "\n".join(lines)
