"""`RUN_DIR/report.html`: one self-contained page to look at a run (no JavaScript, no dependencies).

    bin/spade-engine report RUN_DIR        # written at the end of every `up` too

Line plots (inline SVG) of the per-step metrics, the environments with their verdicts (the failed check of every
rejected design), and the delayed designer rewards. Everything is read back from metrics.jsonl and LMDB.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path

from engine.paths import RunPaths

PLOTS = [
    ("Win rate", [("win_rate_no_hint", "without hint", "#1f77b4"), ("win_rate_hint", "with hint", "#ff7f0e")]),
    ("Regret and learnable share", [("mean_regret", "mean regret", "#2ca02c"), ("learnable_share", "learnable share", "#9467bd")]),
    ("Learner loss", [("learner_loss", "loss", "#d62728")]),
    ("Generation tokens/s", [("tokens_per_s", "tokens/s", "#8c564b")]),
    ("Sample staleness (versions)", [("staleness", "mean staleness", "#e377c2")]),
]


def _svg_plot(title: str, rows: list[dict], series: list[tuple[str, str, str]], width: int = 440, height: int = 200) -> str:
    pad = 36
    xs = [r["step"] + 1 for r in rows]
    values = [r.get(key, 0.0) or 0.0 for r in rows for key, _, _ in series]
    if not xs or not values:
        return f"<figure><figcaption>{html.escape(title)}: no data</figcaption></figure>"
    lo, hi = min(values + [0.0]), max(values + [0.0])
    hi = hi if hi > lo else lo + 1.0
    x_hi = max(xs) if max(xs) > min(xs) else min(xs) + 1

    def point(x: float, y: float) -> str:
        px = pad + (x - min(xs)) / (x_hi - min(xs)) * (width - 2 * pad)
        py = height - pad - (y - lo) / (hi - lo) * (height - 2 * pad)
        return f"{px:.1f},{py:.1f}"

    parts = [
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        f'<rect x="{pad}" y="{pad}" width="{width - 2 * pad}" height="{height - 2 * pad}" fill="none" stroke="#ccc"/>',
        f'<text x="{pad}" y="{pad - 8}" font-size="12">{hi:.3g}</text>',
        f'<text x="{pad}" y="{height - pad + 14}" font-size="12">{lo:.3g}</text>',
        f'<text x="{width - pad}" y="{height - pad + 14}" font-size="12" text-anchor="end">step {max(xs)}</text>',
    ]
    for i, (key, label, colour) in enumerate(series):
        points = " ".join(point(r["step"] + 1, r.get(key, 0.0) or 0.0) for r in rows)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>')
        parts.append(f'<text x="{width - pad}" y="{pad + 14 + 14 * i}" font-size="12" fill="{colour}" text-anchor="end">{html.escape(label)}</text>')
    parts.append("</svg>")
    return f"<figure>{''.join(parts)}<figcaption>{html.escape(title)}</figcaption></figure>"


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write_report(paths: RunPaths, out: Path | None = None) -> str:
    """Write the report to `out` (default RUN_DIR/report.html) and return its path."""
    from storage.store import Store

    metrics = [json.loads(x) for x in paths.metrics.read_text().splitlines() if x.strip()] if paths.metrics.exists() else []
    steps = [m for m in metrics if "envs_requested" in m]
    envs, rewards, counts = [], [], Counter()
    if (paths.store / "data.mdb").exists():
        store = Store.open(paths.store, readonly=True)
        try:
            envs = sorted(store.environments(), key=lambda e: (e.step_created, e.env_id))
            rewards = list(store.designer_rewards())
            counts = Counter((t.role, t.arm, t.status) for t in store.trajectories())
        finally:
            store.close()
    meta = paths.read_meta()
    sections = [
        f"<h1>spade-engine run</h1><p>{html.escape(str(paths.root))}<br>model {html.escape(str(meta.get('model_path', '?')))}"
        f" &middot; sandbox {html.escape(str(meta.get('sandbox_isolation', '?')))} &middot; {len(steps)} steps</p>",
        "<h2>Per step</h2><div class='plots'>" + "".join(_svg_plot(title, steps, series) for title, series in PLOTS) + "</div>",
        "<h2>Environments</h2>"
        + _table(
            ["env", "skill", "step", "source", "valid", "reason / hint"],
            [[e.env_id, e.skill, e.step_created, e.source, "yes" if e.valid else "no", (e.hint if e.valid else e.reason)[:160]] for e in envs],
        ),
        "<h2>Designer rewards (delayed)</h2>"
        + _table(
            ["env", "skill", "made at", "trained at", "regret", "win rate", "reward", "advantage"],
            [[r.env_id, r.skill, r.env_step, r.reward_step, f"{r.regret:+.2f}", f"{r.win_rate:.2f}", f"{r.raw_reward:.3f}", f"{r.advantage:+.3f}"] for r in rewards],
        ),
        "<h2>Trajectories</h2>" + _table(["role", "arm", "status", "count"], [[*key, n] for key, n in sorted(counts.items())]),
    ]
    style = (
        "body{font-family:sans-serif;margin:2em;max-width:1100px} table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ddd;padding:3px 6px;text-align:left} .plots{display:flex;flex-wrap:wrap;gap:12px}"
        "figure{margin:0} figcaption{font-size:13px;text-align:center}"
    )
    page = f"<!doctype html><html><head><meta charset='utf-8'><title>spade-engine run</title><style>{style}</style></head><body>{''.join(sections)}</body></html>"
    out = out or paths.report
    out.write_text(page)
    return str(out)
