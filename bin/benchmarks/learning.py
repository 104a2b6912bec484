"""Learning benchmark: does self-play move the model, and more than training on the fixed pool it starts from?

    bin/bench learning [--minutes 60] [--episodes 64] [--out runs/bench-learning] [--set SECTION.KEY=VALUE ...]
                       [--spade-only] [--reuse-initial EARLIER_OUT] [--reuse-spade EARLIER_OUT]

Three steps, each skipped when its result is already in --out (so an interrupted bench resumes; a fresh --out
repeats the experiment):
  1. `spade-engine up --minutes M` on the embedded default (OUT/spade): SPADE self-play.
  2. `spade-engine up --minutes M --preset fixed-envs` (OUT/fixed): the same budget and settings with no designer,
     training on the probe's own games, the 12 easy and medium seeds (`curriculum.fixed_envs=OUT/probe-envs`), so
     the comparison is like for like (the hard seeds, which the probe leaves out, cannot be won in 3 turns).
  3. The probe: the 12 easy and medium seed environments (OUT/probe-envs), `episodes` episodes each (768 per model by
     default), unhinted, played by the initial model, SPADE's final checkpoint and the fixed pool's with the runs'
     own turn, token and temperature settings (`spade-engine eval ... --out OUT/probe`), and on the same (game,
     seed) pairs by two chance players (actors/evaluation/chance.py): the copy-bot, which plays the example each
     game prints, and a uniform choice among the listed actions.
Why 64 episodes a game: a paired difference's 95 % half-width is about 1.96 sqrt(d / n) for n pairs of which a share
d changes outcome; the last hour's probe had d = 8 % (32 of 384), and training that moves the model changes more:
768 pairs resolve 3 points up to d = 18 %, 384 only up to 9 %.
The comparison (actors/evaluation/paired.py): each model's unhinted win rate, and the paired differences SPADE -
initial, fixed - initial, SPADE - fixed, initial - copy-bot, SPADE - copy-bot and SPADE - random (chance in a
multi-turn game: a uniform listed option each turn), each with its 95 % bootstrap interval over the same
(environment, seed) pairs, a per-game table (each model's wins, the pairs each difference
gained and lost), and the designer's side of each run (valid designs per refresh, learnable share, mean regret,
groups with variance; `designer_side`). It is written to OUT/learning.md and to each run's probe/table.md (the run's report.html shows it), and the
bench ends with one JSON line: ratio = the lower end of the SPADE rise's interval in points, target 0 (a rise whose
interval excludes 0). `--set` values go to both runs, and the `play.*` ones to the probe too. `--spade-only` skips
step 2 (half the time: SPADE against the initial model only; the fixed figures are then null). `--reuse-initial
EARLIER_OUT` copies the initial model's probe episodes from an earlier experiment instead of playing them again
(about 10 minutes saved), when they were played on the same probe environments, by the same model and backend,
with the same turn, token, temperature and stop settings; anything else is an error that says what differs.
`--reuse-spade EARLIER_OUT` takes the SPADE arm from an earlier experiment (or its saved copy, for example
bin/benchmarks/results/learning-60-lora): its probe episodes and the initial model's are copied, and only the fixed
pool is run and probed (about 70 minutes instead of 150). It is refused, saying what differs, unless the probe
environments are the same files and the budget the same (checked before the run), and the fixed run's [learner]
and [play] settings equal the earlier SPADE run's and its base model has the same weights (`initial_model_sha256`,
which learning.json records).
"""

import argparse
import json
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from actors.evaluation.paired import compare, comparison_markdown  # noqa: E402
from engine.protocol.digests import sha256_file  # noqa: E402
from engine.protocol.paths import RunPaths  # noqa: E402
from engine.protocol.run_meta import read_run_meta, require_model_path  # noqa: E402
from engine.tools.group_variance import read_plays, variance_sources  # noqa: E402

SEEDS = REPO / "engine" / "protocol" / "data" / "seeds"
SPADE = REPO / "bin" / "spade-engine"
TARGET = 0.0
INITIAL = "@initial"  # `RUN_DIR@initial` is the run's initial model to eval; its probe rows' label ends so
PROBE_LEVELS = ("easy", "medium")  # the hard seeds are near 0 for the 135M model: they would only add noise
# Chance on the same (game, seed) pairs (actors/evaluation/chance.py): label -> `eval --backend`.
CHANCE = {"copy-bot": "copy", "random": "random"}


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


def model_sha256(run_dir: Path) -> dict[str, str]:
    """The sha256 of each of the run's base model weight files (*.safetensors), by name: the same model on another
    machine, where its folder has another path, has the same digests."""
    folder = Path(require_model_path(run_dir / "run.json"))
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        sys.exit(f"{folder} (the model of {run_dir}) holds no *.safetensors weights")
    return {f.name: sha256_file(f) for f in files}


def probe_envs_sha256(folder: Path) -> dict[str, str]:
    """Each probe environment file's sha256, by name (learning.json records them)."""
    return {p.name: sha256_file(p) for p in sorted(folder.iterdir()) if p.is_file()}


def _copy_rows(rows_file: Path, out: Path, wanted) -> int:
    """Append the rows of `rows_file` that `wanted(row)` keeps to `out`'s probe results, their suite renamed to
    `out`'s probe folder; rows already there are skipped. Returns how many were added."""
    from actors.evaluation.results import ResultsFile, row_key

    results = ResultsFile(out / "probe" / "results.jsonl")
    suite = f"envs:{out / 'probe-envs'}"
    added = 0
    try:
        for row in ResultsFile(rows_file).rows.values():
            if wanted(row):
                row = dict(row, suite=suite)
                if not results.done(row_key(row)):
                    results.add(row)
                    added += 1
    finally:
        results.close()
    return added


def _same_probe_envs(source: Path, out: Path, flag: str) -> None:
    """The earlier experiment's probe environments (its probe-envs folder, else the digests its learning.json
    records, as a saved copy holds) are this one's."""
    summary = source / "learning.json"
    if (source / "probe-envs").is_dir():
        theirs = probe_envs_sha256(source / "probe-envs")
    else:
        theirs = json.loads(summary.read_text()).get("probe_envs_sha256", {}) if summary.is_file() else {}
    for name, digest in probe_envs_sha256(out / "probe-envs").items():
        if theirs.get(name) != digest:
            sys.exit(f"{flag} {source}: its probe environment {name} differs from this one's (or is missing)")


def _probe(out: Path, folder: Path, runs: dict[str, Path], episodes: int, settings: list[str],
           reused: dict[str, str] | None = None) -> tuple[list[dict], str, list[tuple[str, str]]]:
    """Play the probe with every model that `reused` (label -> model id, rows already in the results) lacks."""
    reused = reused or {}
    first = next(iter(runs.values()))
    play = _play_settings(first)
    for name, run_dir in runs.items():
        if _play_settings(run_dir) != play:
            sys.exit(f"the runs played with different [play] settings ({name}): they cannot share one probe")
    labels = [label for label in ["initial", *runs] if label not in reused]
    models = [f"{first}{INITIAL}" if label == "initial" else str(runs[label]) for label in labels]
    flags = ["--suite", "envs", "--file", str(folder), "--episodes", str(episodes), "--turns", str(play["max_turns"]),
             "--max-tokens", str(play["agent_max_tokens"]), "--temperature", str(play["agent_temperature"]),
             "--out", str(out / "probe"), "--json"]
    for item in settings:
        if item.startswith("play."):
            flags += ["--set", item]
    table = _eval(models, flags)
    played = dict(zip(labels, table["model_ids"]))
    for label, backend in CHANCE.items():  # the same pairs played by chance (only the initial model's tokenizer is used)
        played[label] = _eval([f"{first}{INITIAL}"], flags + ["--backend", backend])["model_ids"][0]
    rows = [json.loads(line) for line in (out / "probe" / "results.jsonl").read_text().splitlines() if line.strip()]
    order = dict.fromkeys(["initial", "SPADE", *runs, *CHANCE])  # the models' order in the table, each once
    return rows, table["suite"], [(reused.get(label) or played[label], label) for label in order if label in reused or label in played]


def _eval(models: list[str], flags: list[str]) -> dict:
    """`spade-engine eval MODELS FLAGS` (its rows go to the probe's results.jsonl); its table (--json)."""
    command = [str(SPADE), "eval", *models, *flags]
    _log(f"probe: {' '.join(command[1:])}")
    result = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
    if result.returncode != 0:
        sys.exit(f"the probe failed ({result.returncode})")
    return json.loads(result.stdout)


def reuse_initial(source: Path, out: Path) -> int:
    """Copy the initial model's probe rows of the experiment in `source` into `out`'s probe results (their suite
    renamed to `out`'s probe folder); returns how many were added. SystemExit, saying what differs, when `source`
    is no such experiment or its probe was played on other environments or with other play settings."""
    rows_file = source / "probe" / "results.jsonl"
    if not rows_file.is_file():
        sys.exit(f"--reuse-initial {source}: no probe results there ({rows_file}); give an earlier bench's --out")
    _same_probe_envs(source, out, "--reuse-initial")
    mine, theirs = _play_settings(out / "spade"), _play_settings(source / "spade")
    for key in ("max_turns", "agent_max_tokens", "agent_temperature", "stop_at_action"):
        if mine.get(key) != theirs.get(key):
            sys.exit(f"--reuse-initial {source}: it probed with play.{key} = {theirs.get(key)}, this run plays with "
                     f"{mine.get(key)}: the initial model must be probed again (drop --reuse-initial)")
    model = require_model_path(out / "spade" / "run.json")

    def initial(row: dict) -> bool:
        if not row.get("label", "").endswith(INITIAL):
            return False
        if row["model"].split(":", 1)[-1] != model:
            sys.exit(f"--reuse-initial {source}: its initial model was {row['model']}, this run's is {model}")
        return True

    return _copy_rows(rows_file, out, initial)


def spade_source(source: Path, out: Path, minutes: float) -> tuple[dict, Path]:
    """What can be checked of `source` before the fixed pool runs: a finished experiment (its summary and probe
    rows, which it returns) with an initial model and a SPADE arm, played on `out`'s probe environments, whose SPADE
    arm ran for `minutes`. SystemExit, saying what differs, otherwise."""
    flag = "--reuse-spade"
    summary_file, rows_file = source / "learning.json", source / "probe" / "results.jsonl"
    needed = [summary_file, rows_file, source / "spade" / "run.json", source / "spade" / "config.toml"]
    if not all(f.is_file() for f in needed):
        sys.exit(f"{flag} {source}: no finished experiment there (it needs learning.json, probe/results.jsonl, "
                 "spade/run.json and spade/config.toml)")
    summary = json.loads(summary_file.read_text())
    ids = {m["label"]: m["model"] for m in summary.get("models", [])}
    if "initial" not in ids or "SPADE" not in ids:
        sys.exit(f"{flag} {source}: its learning.json names no initial model and SPADE arm")
    _same_probe_envs(source, out, flag)
    argv = read_run_meta(source / "spade" / "run.json").argv
    theirs_minutes = float(argv[argv.index("--minutes") + 1]) if "--minutes" in argv[:-1] else None
    if theirs_minutes != minutes:
        sys.exit(f"{flag} {source}: its SPADE arm ran for {theirs_minutes} minutes, this bench's budget is {minutes:g}: "
                 "give the same --minutes")
    return summary, rows_file


def reuse_spade(source: Path, out: Path, minutes: float) -> dict[str, str]:
    """Copy the earlier experiment's (`source`) probe rows of the initial model and its SPADE arm into `out`'s probe
    results (their suite renamed to `out`'s probe folder); returns {label: model id} for both. SystemExit, saying
    what differs, unless `source` holds such an experiment (spade_source) whose SPADE arm ran with the fixed run's
    (`out`/fixed) [learner] and [play] settings, from the same base model weights."""
    flag = "--reuse-spade"
    summary, rows_file = spade_source(source, out, minutes)
    ids = {m["label"]: m["model"] for m in summary["models"]}
    theirs = tomllib.loads((source / "spade" / "config.toml").read_text())
    mine = tomllib.loads((out / "fixed" / "config.toml").read_text())
    for section in ("learner", "play"):
        for key in sorted(set(theirs.get(section, {})) | set(mine.get(section, {}))):
            if theirs.get(section, {}).get(key) != mine.get(section, {}).get(key):
                sys.exit(f"{flag} {source}: its SPADE arm ran with {section}.{key} = {theirs.get(section, {}).get(key)!r}, "
                         f"the fixed pool here with {mine.get(section, {}).get(key)!r}: the arms must share [learner] and "
                         "[play] (run both arms: drop --reuse-spade)")
    digest = model_sha256(out / "fixed")
    if summary.get("initial_model_sha256") != digest:
        sys.exit(f"{flag} {source}: its base model's weights (sha256 {summary.get('initial_model_sha256')}) are not this "
                 f"run's ({digest}): run both arms (drop --reuse-spade)")
    reused = {"initial": ids["initial"], "SPADE": ids["SPADE"]}
    _copy_rows(rows_file, out, lambda row: row["model"] in reused.values() and row["suite"] == summary["suite"])
    return reused


def designer_side(run_dir: Path) -> dict:
    """A run's designer over its steps (metrics.jsonl): valid designs per refresh (and per design requested), the
    share of environments played that were learnable (win rate strictly between 0 and 1), the mean regret of the
    refreshes' hinted environments, the share of groups with reward variance, and where that variance comes from
    (engine/tools/group_variance.py): the groups with variance whose plays all copied their printed example (the
    instances' luck) against those where a play departed from it, and the share of plays that copied."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "step" in r]
    refreshes = [r for r in steps if r.get("refresh")]

    def mean(values):
        values = [v for v in values if v is not None]
        return round(sum(values) / len(values), 4) if values else None

    requested = sum(r.get("envs_requested", 0) for r in refreshes)
    sources = variance_sources(read_plays(RunPaths(run_dir))) if (run_dir / "store").is_dir() else {}
    return {
        "steps": len(steps), "refreshes": len(refreshes),
        "valid_designs_per_refresh": mean([r.get("envs_valid") for r in refreshes]),
        "valid_share_of_requested": round(sum(r.get("envs_valid", 0) for r in refreshes) / requested, 4) if requested else None,
        "learnable_share": mean([r.get("learnable_share") for r in steps]),
        "mean_regret": mean([r.get("mean_regret") for r in refreshes if r.get("hint_plays")]),
        "nonzero_variance_share": mean([r.get("nonzero_variance_share") for r in steps]),
        "variance_groups_all_copied": sources.get("all_copied"), "variance_groups_with_departure": sources.get("with_departure"),
        "variance_groups_no_example": sources.get("no_example"),
        "copy_share": sources.get("copy_share"),
    }


def designer_markdown(sides: dict[str, dict]) -> str:
    head = ("| run | steps | refreshes | valid designs / refresh | valid / requested | learnable share | mean regret | "
            "groups with variance | of them: all copied / a play departed / no example | plays that copied the example |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n")
    cell = lambda v: "-" if v is None else f"{v:g}"  # noqa: E731
    return "## The designer's side\n\n" + head + "".join(
        f"| {name} | {d['steps']} | {d['refreshes']} | {cell(d['valid_designs_per_refresh'])} | {cell(d['valid_share_of_requested'])} | "
        f"{cell(d['learnable_share'])} | {cell(d['mean_regret'])} | {cell(d['nonzero_variance_share'])} | "
        f"{cell(d.get('variance_groups_all_copied'))} / {cell(d.get('variance_groups_with_departure'))} / "
        f"{cell(d.get('variance_groups_no_example'))} | {cell(d.get('copy_share'))} |\n"
        for name, d in sides.items())


def _commit() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="each run's wall-clock budget (up --minutes)")
    parser.add_argument("--episodes", type=int, default=64, help="probe episodes per environment (12 environments)")
    parser.add_argument("--out", default=str(REPO / "runs" / "bench-learning"), help="the experiment's folder")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="a config value for both runs")
    parser.add_argument("--spade-only", action="store_true", help="no fixed-pool run: SPADE against the initial model")
    parser.add_argument("--reuse-initial", metavar="EARLIER_OUT", help="copy the initial model's probe from an earlier bench's --out")
    parser.add_argument("--reuse-spade", metavar="EARLIER_OUT", help="take the SPADE arm and the initial model's probe from an earlier bench's --out; run only the fixed pool")
    args = parser.parse_args()
    if args.minutes <= 0 or args.episodes < 1:
        sys.exit("--minutes must be above 0 and --episodes at least 1")
    if args.reuse_spade and (args.spade_only or args.reuse_initial):
        sys.exit("--reuse-spade takes the SPADE arm and the initial model's probe from EARLIER_OUT: drop --spade-only and --reuse-initial")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    folder = _probe_folder(out)
    if args.reuse_spade:
        runs = {"fixed": out / "fixed"}
        spade_source(Path(args.reuse_spade).resolve(), out, args.minutes)  # before the hour, not after it
    else:
        runs = {"SPADE": out / "spade"} if args.spade_only else {"SPADE": out / "spade", "fixed": out / "fixed"}
        _run("SPADE", runs["SPADE"], args.minutes, "", args.set)
    if "fixed" in runs:
        _run("fixed pool", runs["fixed"], args.minutes, "fixed-envs", args.set + [f"curriculum.fixed_envs={folder}"])
    reused = {}
    if args.reuse_initial:
        added = reuse_initial(Path(args.reuse_initial).resolve(), out)
        _log(f"probe: {added} episodes of the initial model copied from {args.reuse_initial}")
    if args.reuse_spade:
        reused = reuse_spade(Path(args.reuse_spade).resolve(), out, args.minutes)
        _log(f"probe: the initial model's and SPADE's episodes copied from {args.reuse_spade}")
    rows, suite, models = _probe(out, folder, runs, args.episodes, args.set, reused)
    pairs = [("SPADE", "initial")] + ([("fixed", "initial"), ("SPADE", "fixed")] if "fixed" in runs else [])
    pairs += [("initial", "copy-bot"), ("SPADE", "copy-bot"), ("SPADE", "random")]
    comparison = compare(rows, suite, models, pairs)
    comparison.update(initial_model_sha256=model_sha256(next(iter(runs.values()))), probe_envs_sha256=probe_envs_sha256(folder), commit=_commit(),
                      settings=args.set, minutes=args.minutes, reused_spade=args.reuse_spade,
                      designer={name: designer_side(path) for name, path in runs.items() if (path / "metrics.jsonl").is_file()})
    title = f"SPADE against the initial model, {args.minutes:g} min" if args.spade_only else \
        f"SPADE against the fixed pool, {args.minutes:g} min each"
    reuse_line = f"; SPADE's arm and the initial model's probe from {args.reuse_spade}" if args.reuse_spade else ""
    text = (f"# Learning: {title}\n\n" + comparison_markdown(comparison) + "\n\n" + designer_markdown(comparison["designer"])
            + f"\n\nsettings: {' '.join(args.set) or 'the default'}; probe: {args.episodes} episodes per environment"
            + f"{reuse_line}; commit {comparison['commit']}\n")
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
        "spade_minus_fixed_points": points(diffs.get("SPADE-fixed")), "win_rate_copy_bot": round(rates["copy-bot"]["win_rate"], 4),
        "win_rate_random": round(rates["random"]["win_rate"], 4), "spade_minus_copy_bot_points": points(diffs.get("SPADE-copy-bot")),
        "spade_minus_random_points": points(diffs.get("SPADE-random")),
        "settings": args.set, "reused_spade": args.reuse_spade, "out": str(out),
    }))


if __name__ == "__main__":
    main()
