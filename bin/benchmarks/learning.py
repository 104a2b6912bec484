"""Learning benchmark: does self-play move the model, and more than training on the fixed pool it starts from?

    bin/bench learning [--minutes 60] [--episodes 32] [--out runs/bench-learning] [--set SECTION.KEY=VALUE ...]
                       [--spade-only] [--reuse-initial EARLIER_OUT]

Three steps, each skipped when its result is already in --out (so an interrupted bench resumes; a fresh --out
repeats the experiment):
  1. `spade-engine up --minutes M` on the embedded default (OUT/spade): SPADE self-play.
  2. `spade-engine up --minutes M --preset fixed-envs` (OUT/fixed): the same budget and settings with no designer,
     training on the shipped seed environments, the pool SPADE's designer starts from (its edits are variants of them).
  3. The probe: the 12 easy and medium seed environments (OUT/probe-envs), `episodes` episodes each (384 per model by
     default), unhinted, played by the initial model, SPADE's final checkpoint and the fixed pool's with the runs'
     own turn, token and temperature settings (`spade-engine eval ... --out OUT/probe`).
The comparison (actors/evaluation/paired.py): each model's unhinted win rate, and the paired differences SPADE -
initial, fixed - initial and SPADE - fixed, each with its 95 % bootstrap interval over the same (environment, seed)
pairs. It is written to OUT/learning.md and to each run's probe/table.md (the run's report.html shows it), and the
bench ends with one JSON line: ratio = the lower end of the SPADE rise's interval in points, target 0 (a rise whose
interval excludes 0). `--set` values go to both runs, and the `play.*` ones to the probe too. `--spade-only` skips
step 2 (half the time: SPADE against the initial model only; the fixed figures are then null). `--reuse-initial
EARLIER_OUT` copies the initial model's probe episodes from an earlier experiment instead of playing them again
(about 10 minutes saved), when they were played on the same probe environments, by the same model and backend,
with the same turn, token and temperature settings; anything else is an error that says what differs.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from actors.evaluation.paired import compare, comparison_markdown  # noqa: E402

SEEDS = REPO / "engine" / "protocol" / "data" / "seeds"
SPADE = REPO / "bin" / "spade-engine"
TARGET = 0.0
INITIAL = "@initial"  # `RUN_DIR@initial` is the run's initial model to eval; its probe rows' label ends so
PROBE_LEVELS = ("easy", "medium")  # the hard seeds are near 0 for the 135M model: they would only add noise


def _log(text: str) -> None:
    print(f"[bench learning] {text}", file=sys.stderr, flush=True)


def _run(name: str, run_dir: Path, minutes: float, preset: str, settings: list[str]) -> None:
    done = run_dir / ".bench-done"
    if done.is_file():
        _log(f"{name}: already run in {run_dir} (remove it, or give a new --out, to run it again)")
        return
    if run_dir.exists():
        sys.exit(f"{run_dir} holds an unfinished run: remove it (or give a new --out) and run the bench again")
    command = [str(SPADE), "up", "--no-live", "--minutes", f"{minutes:g}", "--run-dir", str(run_dir)]
    if preset:
        command += ["--preset", preset]
    for item in settings:
        command += ["--set", item]
    _log(f"{name}: {' '.join(command[1:])} (log: {run_dir}.log)")
    started = time.perf_counter()
    with open(f"{run_dir}.log", "w") as log:
        result = subprocess.run(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        sys.exit(f"{name}: `up` failed ({result.returncode}); its output is in {run_dir}.log")
    done.write_text(json.dumps({"seconds": round(time.perf_counter() - started, 1)}) + "\n")


def _probe_folder(out: Path) -> Path:
    folder = out / "probe-envs"
    entries = [e for e in json.loads((SEEDS / "manifest.json").read_text()) if e.get("level") in PROBE_LEVELS]
    folder.mkdir(parents=True, exist_ok=True)
    for entry in entries:
        shutil.copyfile(SEEDS / entry["file"], folder / entry["file"])
    (folder / "manifest.json").write_text(json.dumps(entries, indent=1) + "\n")
    return folder


def _play_settings(run_dir: Path) -> dict:
    config = tomllib.loads((run_dir / "config.toml").read_text())
    return config["play"]


def _probe(out: Path, folder: Path, runs: dict[str, Path], episodes: int, settings: list[str]) -> tuple[list[dict], str, list[tuple[str, str]]]:
    play = _play_settings(runs["SPADE"])
    for name, run_dir in runs.items():
        if _play_settings(run_dir) != play:
            sys.exit(f"the runs played with different [play] settings ({name}): they cannot share one probe")
    models = [f"{runs['SPADE']}{INITIAL}", *(str(p) for p in runs.values())]
    command = [str(SPADE), "eval", *models, "--suite", "envs", "--file", str(folder), "--episodes", str(episodes),
               "--turns", str(play["max_turns"]), "--max-tokens", str(play["agent_max_tokens"]),
               "--temperature", str(play["agent_temperature"]), "--out", str(out / "probe"), "--json"]
    for item in settings:
        if item.startswith("play."):
            command += ["--set", item]
    _log(f"probe: {' '.join(command[1:])}")
    result = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
    if result.returncode != 0:
        sys.exit(f"the probe failed ({result.returncode})")
    table = json.loads(result.stdout)
    labels = ["initial", *runs]
    rows = [json.loads(line) for line in (out / "probe" / "results.jsonl").read_text().splitlines() if line.strip()]
    return rows, table["suite"], list(zip(table["model_ids"], labels))


def reuse_initial(source: Path, out: Path) -> int:
    """Copy the initial model's probe rows of the experiment in `source` into `out`'s probe results (their suite
    renamed to `out`'s probe folder); returns how many were added. SystemExit, saying what differs, when `source`
    is no such experiment or its probe was played on other environments or with other play settings."""
    rows_file = source / "probe" / "results.jsonl"
    if not rows_file.is_file():
        sys.exit(f"--reuse-initial {source}: no probe results there ({rows_file}); give an earlier bench's --out")
    for name in sorted(p.name for p in (out / "probe-envs").iterdir()):
        theirs = source / "probe-envs" / name
        if not theirs.is_file() or theirs.read_bytes() != (out / "probe-envs" / name).read_bytes():
            sys.exit(f"--reuse-initial {source}: its probe environment {name} differs from this one's (or is missing)")
    mine, theirs = _play_settings(out / "spade"), _play_settings(source / "spade")
    for key in ("max_turns", "agent_max_tokens", "agent_temperature"):
        if mine.get(key) != theirs.get(key):
            sys.exit(f"--reuse-initial {source}: it probed with play.{key} = {theirs.get(key)}, this run plays with "
                     f"{mine.get(key)}: the initial model must be probed again (drop --reuse-initial)")
    from actors.evaluation.results import ResultsFile, row_key

    model = json.loads((out / "spade" / "run.json").read_text())["model_path"]
    results = ResultsFile(out / "probe" / "results.jsonl")
    suite = f"envs:{out / 'probe-envs'}"
    added = 0
    try:
        for row in ResultsFile(rows_file).rows.values():
            if not row.get("label", "").endswith(INITIAL):
                continue
            if row["model"].split(":", 1)[-1] != model:
                sys.exit(f"--reuse-initial {source}: its initial model was {row['model']}, this run's is {model}")
            row = dict(row, suite=suite)
            if not results.done(row_key(row)):
                results.add(row)
                added += 1
    finally:
        results.close()
    return added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="each run's wall-clock budget (up --minutes)")
    parser.add_argument("--episodes", type=int, default=32, help="probe episodes per environment (12 environments)")
    parser.add_argument("--out", default=str(REPO / "runs" / "bench-learning"), help="the experiment's folder")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="a config value for both runs")
    parser.add_argument("--spade-only", action="store_true", help="no fixed-pool run: SPADE against the initial model")
    parser.add_argument("--reuse-initial", metavar="EARLIER_OUT", help="copy the initial model's probe from an earlier bench's --out")
    args = parser.parse_args()
    if args.minutes <= 0 or args.episodes < 1:
        sys.exit("--minutes must be above 0 and --episodes at least 1")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    runs = {"SPADE": out / "spade"} if args.spade_only else {"SPADE": out / "spade", "fixed": out / "fixed"}
    _run("SPADE", runs["SPADE"], args.minutes, "", args.set)
    if "fixed" in runs:
        _run("fixed pool", runs["fixed"], args.minutes, "fixed-envs", args.set)
    folder = _probe_folder(out)
    if args.reuse_initial:
        added = reuse_initial(Path(args.reuse_initial).resolve(), out)
        _log(f"probe: {added} episodes of the initial model copied from {args.reuse_initial}")
    rows, suite, models = _probe(out, folder, runs, args.episodes, args.set)
    pairs = [("SPADE", "initial")] + ([("fixed", "initial"), ("SPADE", "fixed")] if "fixed" in runs else [])
    comparison = compare(rows, suite, models, pairs)
    title = f"SPADE against the initial model, {args.minutes:g} min" if args.spade_only else \
        f"SPADE against the fixed pool, {args.minutes:g} min each"
    text = (f"# Learning: {title}\n\n" + comparison_markdown(comparison)
            + f"\n\nsettings: {' '.join(args.set) or 'the default'}; probe: {args.episodes} episodes per environment\n")
    (out / "learning.md").write_text(text)
    (out / "learning.json").write_text(json.dumps(comparison, indent=1) + "\n")
    for run_dir in runs.values():
        (run_dir / "probe").mkdir(exist_ok=True)
        (run_dir / "probe" / "table.md").write_text(text)
        subprocess.run([str(SPADE), "report", str(run_dir)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=sys.stderr)
    print(text, file=sys.stderr)
    rates = {m["label"]: m for m in comparison["models"]}
    diffs = {f"{d['a']}-{d['b']}": d for d in comparison["differences"]}

    def points(d: dict | None) -> list[float] | None:
        return None if d is None else [round(100 * d["difference"], 2), round(100 * d["low"], 2), round(100 * d["high"], 2)]

    print(json.dumps({
        "bench": "learning", "ratio": round(100 * diffs["SPADE-initial"]["low"], 2), "target": TARGET,
        "minutes": args.minutes, "episodes_per_model": comparison["episodes_per_model"],
        "win_rate_initial": round(rates["initial"]["win_rate"], 4), "win_rate_spade": round(rates["SPADE"]["win_rate"], 4),
        "win_rate_fixed": round(rates["fixed"]["win_rate"], 4) if "fixed" in rates else None,
        "spade_rise_points": points(diffs["SPADE-initial"]), "fixed_rise_points": points(diffs.get("fixed-initial")),
        "spade_minus_fixed_points": points(diffs.get("SPADE-fixed")), "settings": args.set, "out": str(out),
    }))


if __name__ == "__main__":
    main()
