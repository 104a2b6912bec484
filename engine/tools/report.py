"""`RUN_DIR/report.html`: one self-contained page to look at a run (PNG plots inline, no JavaScript).

    bin/spade-engine report RUN_DIR [--out FILE]      # written at the end of every `up` too

Sections (each an anchor): #plots, the per-step figures drawn by matplotlib (engine/tools/plots.py) with labelled axes:
win rates, the paper's Figure 6 view (the learnable share of the environment budget over steps), diversity (Vendi
score / n of the step's environments and of the memory), validation pass rate and rejection reasons, formula
reveal, reward granularity, regret and designer rewards, learner loss by policy version, tokens/s per role,
staleness and win rate by skill; #best-worst, the best and worst environments by designer reward (regret when none
is stored yet), each linking to its code (#env-ID) and to a transcript of its first unhinted play (#traj-KEY);
#environments, every environment with its verdict; #designer-rewards; #trajectories; #store-problems, the records
that did not decode (skipped, named by key). Read from metrics.jsonl and LMDB (read-only, beside a live run).
"""

from __future__ import annotations

import base64
import html
from collections import Counter, defaultdict
from pathlib import Path

from engine.metrics.curriculum_signals import rejection_reason
from engine.tools.env_table import EnvRow, environment_rows
from engine.protocol.metrics_file import read_rows
from engine.protocol.paths import RunPaths
from engine.metrics.phases import PHASES
from engine.tools.plots import Figure, bar_plot, line_plot, stacked_bar_plot

BEST_WORST = 5
MAX_ENV_ROWS = 500


def _e(value) -> str:
    return html.escape(str(value))


def anchor(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)


def _series(steps: list[dict], keys: dict[str, str]) -> dict[str, tuple[list, list]]:
    return {label: ([m["step"] for m in steps], [m.get(key) for m in steps]) for label, key in keys.items() if any(key in m for m in steps)} or {
        label: ([], []) for label in keys
    }


def figures(metrics: list[dict], rejected: Counter, rewards: list) -> list[Figure]:
    steps = [m for m in metrics if "envs_requested" in m]
    share = {"learnable share of the budget (this step)": "learnable_share_budget", "over the current window": "learnable_share_window",
             "of the environments played": "learnable_share"}
    skills = sorted({s for m in steps for s in m.get("win_rate_by_skill", {})})
    by_env_step: dict[int, list[float]] = defaultdict(list)
    for r in rewards:
        by_env_step[r.env_step].append(r.raw_reward)
    embedding = next((m["embedding"] for m in reversed(steps) if m.get("embedding")), "")
    versions = [m for m in metrics if "policy_version" in m]
    return [
        line_plot("Win rate", "step", "win rate (share of plays won)",
                  _series(steps, {"without hint": "win_rate_no_hint", "with hint": "win_rate_hint"}), ylim=(-0.05, 1.05)),
        line_plot("Learnable share of the environment budget (Figure 6)", "step", "learnable share (win rate in [0.2, 0.8])",
                  _series(steps, share), ylim=(-0.05, 1.05)),
        line_plot("Diversity", "step", "Vendi score / n", _series(steps, {"step's environments": "vendi_envs_per_n", "memory": "vendi_memory_per_n"}),
                  ylim=(0, 1.05), note=f"embedding: {embedding}" if embedding else ""),
        line_plot("Validation pass rate", "step", "valid designs / design attempts", _series(steps, {"pass rate": "validation_pass_rate"}), ylim=(-0.05, 1.05)),
        line_plot("Valid designs per refresh, fresh and edited", "step", "valid designs / design attempts",
                  _series([m for m in steps if m.get("envs_requested")], {"fresh designs": "design_valid_rate_fresh", "edits": "design_valid_rate_edit"}),
                  ylim=(-0.05, 1.05)),
        line_plot("Groups with variance", "step", "share of trained groups with differing returns",
                  _series(steps, {"non-zero variance": "nonzero_variance_share"}), ylim=(-0.05, 1.05)),
        bar_plot("Rejection reasons", "failed check", "rejected designs", dict(rejected.most_common())),
        line_plot("Formula reveal", "step", "share of new environments revealing", _series(steps, {"formula reveal rate": "formula_reveal_rate"}), ylim=(-0.05, 1.05)),
        line_plot("Reward granularity", "step", "distinct reward levels per environment",
                  _series(steps, {"reward levels": "reward_levels", "partial (0 < r < 1)": "partial_reward_levels"})),
        line_plot("Regret and designer reward", "step", "value",
                  {**_series(steps, {"mean regret (hint - no hint)": "mean_regret"}),
                   "designer reward (mean, by step made)": (sorted(by_env_step), [sum(v) / len(v) for _, v in sorted(by_env_step.items())])}),
        line_plot("Learner loss", "policy version", "loss", {"loss": ([m["policy_version"] for m in versions], [m.get("learner_loss") for m in versions])}),
        line_plot("Generation tokens/s", "step", "tokens / s",
                  _series(steps, {"all": "tokens_per_s", "agent": "tokens_per_s_agent", "designer": "tokens_per_s_designer"})),
        line_plot("Staleness", "step", "policy versions behind",
                  _series(steps, {"learner (token mean)": "staleness", "plays (oldest token, mean)": "sample_staleness_mean"})),
        line_plot("Win rate by skill", "step", "win rate (unhinted plays)",
                  {s: ([m["step"] for m in steps], [m.get("win_rate_by_skill", {}).get(s) for m in steps]) for s in skills} or {"no skill yet": ([], [])},
                  ylim=(-0.05, 1.05)),
        time_figure(steps),
    ] + ([probe_figure(metrics)] if any(isinstance(m.get("eval"), dict) for m in metrics) else [])  # with eval.every


def probe_figure(metrics: list[dict]) -> Figure:
    """The in-loop probe (`eval.every`, engine/evaluation.py) by policy version, its 95 % Wilson interval shaded."""
    evals = sorted((m["eval"] for m in metrics if isinstance(m.get("eval"), dict)), key=lambda e: e["policy_version"])
    xs = [e["policy_version"] for e in evals]
    label = f"win rate ({evals[-1]['suite']}, {evals[-1]['episodes']} episodes)" if evals else "win rate"
    return line_plot("In-loop probe (never trained on)", "policy version", "win rate", {label: (xs, [e["win_rate"] for e in evals])},
                     bands={label: (xs, [e["low"] for e in evals], [e["high"] for e in evals])}, ylim=(-0.05, 1.05))


def time_figure(steps: list[dict]) -> Figure:
    """Each step's wall time by phase (engine/metrics/phases.py), the generators' busy share on a second axis."""
    timed = [m for m in steps if "time_step_s" in m]
    xs = [m["step"] for m in timed]
    return stacked_bar_plot("Time per step, by phase", "step", "seconds", xs,
                            {phase.replace("_", " "): [m.get(f"time_{phase}_s", 0.0) for m in timed] for phase in PHASES},
                            total=("step wall time", [m["time_step_s"] for m in timed]),
                            share=("generator busy share", [m.get("generator_busy_share", 0.0) for m in timed]))


def learning_summary(metrics: list[dict]) -> list[list]:
    """The run's learning signal in figures: valid designs (fresh and edited apart), groups with variance, and the
    learner updates whose policy gradient was not zero."""
    steps = [m for m in metrics if "envs_requested" in m]
    learner = [m.get("learner", {}) for m in metrics if "policy_version" in m]

    def rate(part, whole) -> str:
        a, b = sum(part(m) for m in steps), sum(whole(m) for m in steps)
        return f"{a / b:.1%} ({a} of {b})" if b else "-"

    with_groups = [m for m in steps if "agent_groups" in m]
    varied = [m for m in with_groups if m["agent_groups"] > m.get("zero_variance_groups", 0)]
    return [
        ["valid designs, all attempts", rate(lambda m: m["envs_valid"], lambda m: m["envs_requested"])],
        ["valid designs, fresh", rate(lambda m: m["envs_valid"] - m.get("edits_valid", 0), lambda m: m["envs_requested"] - m.get("edits_requested", 0))],
        ["valid designs, edits", rate(lambda m: m.get("edits_valid", 0), lambda m: m.get("edits_requested", 0))],
        ["valid edits per edit reply (a copy of the parent is drawn again)", rate(lambda m: m.get("edits_valid", 0), lambda m: m.get("edit_replies", 0))],
        ["edits rejected as duplicates", str(sum(m.get("edit_duplicates", 0) for m in steps))],
        ["steps with a group of non-zero variance", f"{len(varied)} of {len(with_groups)}" if with_groups else "-"],
        ["groups with non-zero variance", rate(lambda m: m.get("agent_groups", 0) - (m.get("zero_variance_groups", 0) if "agent_groups" in m else 0),
                                               lambda m: m.get("agent_groups", 0))],
        ["learner updates with a non-zero policy gradient", f"{sum(1 for m in learner if m.get('grad_norm', 0) > 0)} of {len(learner)}"
                                                             f" ({int(sum(m.get('optimizer_step', 0) for m in learner))} optimizer steps in all)"],
    ]


def _figure_html(i: int, f: Figure) -> str:
    data = base64.b64encode(f.png).decode()
    return (
        f"<figure id='fig-{i}'><img src='data:image/png;base64,{data}' alt='{_e(f.title)}' width='520' height='320' "
        f"data-xlabel='{_e(f.xlabel)}' data-ylabel='{_e(f.ylabel)}'><figcaption>{_e(f.title)}: x {_e(f.xlabel)}, y {_e(f.ylabel)}"
        f"</figcaption></figure>"
    )


def _table(headers: list[str], rows: list[list], raw: bool = False) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    cell = (lambda c: str(c)) if raw else _e
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _num(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def best_and_worst(rows: list[EnvRow]) -> tuple[list[EnvRow], list[EnvRow], str]:
    played = [r for r in rows if r.valid and r.source == "designed" and r.plays.get("no_hint")]
    if any(r.designer_reward is not None for r in played):
        key, by = (lambda r: r.designer_reward if r.designer_reward is not None else float("-inf")), "designer reward"
    elif any(r.regret is not None for r in played):
        key, by = (lambda r: r.regret if r.regret is not None else float("-inf")), "regret"
    else:
        key, by = (lambda r: r.win.get("no_hint") or 0.0), "win rate without hint"
    ranked = sorted(played, key=lambda r: (key(r), r.env_id), reverse=True)
    best = ranked[: min(BEST_WORST, (len(ranked) + 1) // 2)]  # a short list is split, so both tables show some
    worst = [r for r in reversed(ranked) if r not in best][:BEST_WORST]
    return best, worst, by


def _rank_rows(rows: list[EnvRow]) -> list[list]:
    return [[
        f"<a href='#env-{anchor(r.env_id)}'>{_e(r.env_id)}</a>", _e(r.skill), r.step, _num(r.win.get("no_hint")), _num(r.win.get("hint")),
        _num(r.regret, "+.3f"), _num(r.designer_reward, ".3f"),
        f"<a href='#traj-{anchor(r.first_play)}'>transcript</a>" if r.first_play else "-",
    ] for r in rows]


def _details(store, paths: RunPaths, rows: list[EnvRow], skipped: list) -> str:
    from engine.tools.inspector import transcript_lines
    from engine.metrics.observations import load_tokenizer
    from storage.scan import tolerant_get

    try:
        tokenizer = load_tokenizer(paths.read_model_path())
    except (OSError, KeyError, ValueError):
        tokenizer = None
    parts = []
    for r in rows:
        env = tolerant_get(store, "environments", r.env_id, skipped)
        if env is None:
            continue
        checks = "".join(f"<li>{'pass' if ok else 'FAIL'} {_e(name)}: {_e(detail)}</li>" for name, ok, detail in env.checks)
        parts.append(
            f"<section id='env-{anchor(r.env_id)}'><h3>{_e(r.env_id)} ({_e(r.skill)}, step {r.step})</h3><p>hint: {_e(env.hint or '(none)')}</p>"
            f"<details><summary>validation report</summary><ul>{checks}</ul></details><pre>{_e(env.code)}</pre></section>"
        )
        trajectory = tolerant_get(store, "trajectories", r.first_play, skipped) if r.first_play else None
        if trajectory is not None:
            parts.append(f"<section id='traj-{anchor(r.first_play)}'><h3>transcript {_e(r.first_play)}</h3>"
                         f"<pre>{_e(chr(10).join(transcript_lines(trajectory, tokenizer)))}</pre></section>")
    return "".join(parts)


def write_report(paths: RunPaths, out: Path | None = None, problems: list | None = None) -> str:
    """Write the report to `out` (default RUN_DIR/report.html) and return its path. The store's damaged records
    (storage/scan.py check_records) are listed in the page, and appended to `problems` when it is given."""
    from storage.scan import check_records, describe_skipped, tolerant
    from storage.store import Store

    metrics = read_rows(paths.metrics)
    steps = [m for m in metrics if "envs_requested" in m]
    rows, rewards, counts, rejected, skipped, details = [], [], Counter(), Counter(), [], ""
    best = worst = []
    by = ""
    if (paths.store / "data.mdb").exists():
        store = Store.open(paths.store, readonly=True)
        try:
            skipped = check_records(store)  # what the scans below skip is among these
            seen: list = []
            rows = sorted(environment_rows(store, seen), key=lambda r: (r.step, r.env_id))
            rewards = list(tolerant(store, "designer_rewards", seen))
            counts = Counter((t.role, t.arm, t.status) for t in tolerant(store, "trajectories", seen))
            rejected = Counter(rejection_reason(e.reason) for e in tolerant(store, "environments", seen) if not e.valid)
            best, worst, by = best_and_worst(rows)
            details = _details(store, paths, best + worst, seen)
        finally:
            store.close()
        if problems is not None:
            problems.extend(skipped)
    meta = paths.read_meta()
    env_table = [[f"<a href='#env-{anchor(r.env_id)}'>{_e(r.env_id)}</a>" if r in best + worst else _e(r.env_id), _e(r.skill), r.step,
                  _e(r.source), _e(r.verdict), _num(r.win.get("no_hint")), _num(r.win.get("hint")), _num(r.regret, "+.2f"),
                  _e((r.hint if r.valid else "")[:140])] for r in rows[:MAX_ENV_ROWS]]
    rank_headers = ["env", "skill", "step", "win (no hint)", "win (hint)", "regret", "designer reward", "play"]
    sections = [
        f"<h1>spade-engine run</h1><p>{_e(paths.root)}<br>model {_e(meta.model_path or '?')} &middot; sandbox "
        f"{_e(meta.sandbox_isolation or '?')} &middot; {len(steps)} steps &middot; {len(rows)} environments</p>"
        "<nav><a href='#plots'>plots</a> &middot; <a href='#best-worst'>best and worst</a> &middot; <a href='#environments'>environments</a>"
        " &middot; <a href='#designer-rewards'>designer rewards</a> &middot; <a href='#trajectories'>trajectories</a></nav>",
        "<h2 id='plots'>Per step</h2><div class='plots'>" + "".join(_figure_html(i, f) for i, f in enumerate(figures(metrics, rejected, rewards))) + "</div>",
        f"<h2 id='best-worst'>Best and worst environments (by {_e(by or 'designer reward')})</h2><h3>best</h3>"
        + _table(rank_headers, _rank_rows(best), raw=True) + "<h3>worst</h3>" + _table(rank_headers, _rank_rows(worst), raw=True) + details,
        "<h2 id='environments'>Environments</h2>"
        + _table(["env", "skill", "step", "source", "verdict", "win (no hint)", "win (hint)", "regret", "hint"], env_table, raw=True)
        + (f"<p>{len(rows) - MAX_ENV_ROWS} more: see <code>bin/spade-engine inspect {_e(paths.root)}</code></p>" if len(rows) > MAX_ENV_ROWS else ""),
        "<h2 id='designer-rewards'>Designer rewards (delayed)</h2>"
        + _table(["env", "skill", "made at", "trained at", "regret", "win rate", "reward", "advantage"],
                 [[r.env_id, r.skill, r.env_step, r.reward_step, f"{r.regret:+.2f}", f"{r.win_rate:.2f}", f"{r.raw_reward:.3f}", f"{r.advantage:+.3f}"] for r in rewards]),
        "<h2 id='trajectories'>Trajectories</h2>" + _table(["role", "arm", "status", "count"], [[*key, n] for key, n in sorted(counts.items())]),
    ]
    sections.insert(1, "<h2 id='learning'>Does it learn?</h2>" + _table(["measure", "value"], learning_summary(metrics)))
    probe = paths.root / "probe" / "table.md"  # `bin/spade-engine eval RUN_DIR@initial RUN_DIR ... --out RUN_DIR/probe`
    if probe.is_file():
        sections.insert(2, "<h2 id='probe'>Probe set: initial model against the final checkpoint</h2><pre>" + _e(probe.read_text()[:20000]) + "</pre>")
    evals = [m["eval"] for m in metrics if isinstance(m.get("eval"), dict)]  # in-loop evaluation (engine/evaluation.py)
    if evals:
        sections.insert(2, "<h2 id='evaluation'>Evaluation (in-loop probe set, never trained on)</h2>" + _table(
            ["policy version", "suite", "win rate [95% Wilson]", "episodes", "failed", "by group"],
            [[e["policy_version"], e["suite"], f"{e['win_rate']:.3f} [{e['low']:.3f}, {e['high']:.3f}]", e["episodes"], e["failed"],
              ", ".join(f"{g} {w:.2f}" for g, w in e["groups"].items())] for e in evals]))
    if skipped:
        sections.append("<h2 id='store-problems'>Store problems</h2><ul>" + "".join(f"<li>{_e(line)}</li>" for line in describe_skipped(skipped, 50)) + "</ul>")
    style = (
        "body{font-family:sans-serif;margin:2em;max-width:1150px} table{border-collapse:collapse;font-size:13px;margin-bottom:1em}"
        "td,th{border:1px solid #ddd;padding:3px 6px;text-align:left} .plots{display:flex;flex-wrap:wrap;gap:12px}"
        "figure{margin:0} figcaption{font-size:12px;text-align:center;color:#444} pre{background:#f6f6f6;padding:8px;"
        "font-size:12px;overflow-x:auto;max-height:420px} section{border-top:1px solid #eee;margin-top:1em}"
    )
    page = f"<!doctype html><html><head><meta charset='utf-8'><title>spade-engine run</title><style>{style}</style></head><body>{''.join(sections)}</body></html>"
    out = out or paths.report
    out.write_text(page)
    return str(out)
