"""bin/bench async: the real engine, synchronous (eta = 0) against asynchronous (eta = 4), on a timed fake backend.

Both runs use the real processes, ZeroMQ messages, sandbox, LMDB storage and learner loop. The workload is
fixed so the figure means something:
- episode (completion) lengths are log-normal, median 300 tokens, sigma 1.0, capped at 8,192;
- generation costs a fixed time per token for each concurrent request (`--ms-per-token`);
- the learner's step takes as long as the mean generation time of one batch, simulated by
  `learner.simulated_update_s` (the loop, publishing and messages stay real). That phrase has two readings,
  and the bench measures both, each against its own synchronous baseline:
  - `episode` (the headline): the mean over a batch's episodes of each one's generation time,
    E[min(L, cap)] x time per token (about 1 s at 2 ms/token);
  - `batch`: the mean time to generate a whole batch in the synchronous engine, which waits for its slowest
    episode, E[max of the batch] x time per token (about 4 s). Here the synchronous step is generation plus an
    equally long update, and no engine can beat one update per step, so this ratio cannot exceed 2.
  Both means are computed by Monte Carlo from the same distribution.
- a third reading, `capacity`, gives both sides the same finite generator: at most `--capacity` sequences decode
  at once (default half a step's plays), the others queue, as on a continuous-batching server whose batch is
  full; the learner step is the headline's. Overlap then buys less: a synchronous step waits for its queue to
  drain, an asynchronous one keeps the slots busy while the learner trains.
Each run also reports the staleness of every trained agent sample (the version that trained it minus the oldest
version that sampled one of its tokens) as a histogram, and the samples dropped as too stale.
Environments: the e2e test's pick-1-or-2 environment as the seed of each skill (no designer); the timed
backend always answers 1 or 2, so each play is one generation.
Samples/s = agent samples sent to the learner / wall time from the first step to the last published version.
Ends with one JSON line {"bench": "async", "ratio": async / sync (episode reading), "target": 2.5, ...}, the
other readings' figures beside it (`batch_reading_*`, `capacity_reading_*`).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from engine.protocol.metrics_file import read_rows  # noqa: E402 (after the path line above)
from engine.protocol.run_meta import read_run_meta  # noqa: E402

READINGS = ("episode", "batch", "capacity")  # the learner step's two readings, and a finite generator
ENV = (REPO / "tests" / "e2e" / "data" / "pick_env.py").read_text()  # pick 1 or 2: one answer ends it


def learner_step_seconds(reading: str, plays: int, seconds_per_token: float, median: float, sigma: float, cap: int, trials: int = 20000) -> float:
    """`episode`: E[one episode's generation time]; `batch`: E[the slowest of `plays` episodes' time]."""
    rng = random.Random(0)
    total = 0.0
    for _ in range(trials):
        lengths = [min(int(rng.lognormvariate(math.log(median), sigma)), cap) for _ in range(plays)]
        total += sum(lengths) / plays if reading == "episode" else max(lengths)
    return total / trials * seconds_per_token


def staleness_histogram(run_dir: Path) -> dict[str, int]:
    """For every trained agent sample: its batch's version minus the oldest version among its sampled tokens."""
    from collections import Counter

    from engine.protocol.messages import unpack_ints
    from storage.store import Store

    store = Store.open(run_dir / "store", readonly=True)
    try:
        counts: Counter = Counter()
        for batch in store.batches():
            for entry in batch.entries:
                trajectory = store.trajectory(entry.trajectory_key)
                if trajectory is None or trajectory.role != "agent":
                    continue
                versions = unpack_ints(trajectory.sample.versions)
                sampled = versions[versions >= 0]
                if sampled.size:
                    counts[str(batch.version - int(sampled.min()))] += 1
    finally:
        store.close()
    return dict(sorted(counts.items(), key=lambda kv: int(kv[0])))


def run(mode: str, eta: int, args, root: Path, model: Path, seeds: Path, learner_s: float, capacity: int = 0) -> dict:
    run_dir = root / mode
    sets = {
        "inference.backend": '"timed"',
        "inference.timed_seconds_per_token": str(args.ms_per_token / 1000),
        "inference.concurrency": "512",
        "inference.max_batch": "512",
        "run.max_staleness": str(eta),
        "curriculum.design": "false",
        "curriculum.seeds": json.dumps(str(seeds)),
        "curriculum.skills": '["A", "B"]',
        "curriculum.skills_per_refresh": "2",
        "curriculum.envs_per_step": "2",
        "curriculum.refresh_interval": str(args.steps),
        "inference.timed_capacity": str(capacity),
        "play.plays_per_env": str(args.plays // 2),  # every play is trained (no designer, so no hinted plays)
        "play.hint_plays_per_env": "0",
        "play.max_turns": "1",
        "play.agent_max_tokens": "8192",
        "play.max_context_tokens": "16384",
        "learner.micro_batch_tokens": "16384",
        "sandbox.workers": str(args.plays * (eta + 1) + 4),
        "learner.simulated_update_s": str(learner_s),
    }
    command = [sys.executable, "-m", "engine.cli", "up", "--no-live", "--model", str(model), "--run-dir", str(run_dir), "--steps", str(args.steps)]
    for key, value in sets.items():
        command += ["--set", f"{key}={value}"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    started = read_run_meta(run_dir / "run.json").curriculum_started
    lines = read_rows(run_dir / "metrics.jsonl")
    samples = sum(m.get("agent_samples", 0) for m in lines)  # dropped (too stale) samples are not counted
    dropped = sum(m.get("dropped_stale", 0) for m in lines)
    seconds = max(m["time"] for m in lines) - started
    return {
        "samples": samples, "dropped": dropped, "seconds": seconds, "samples_per_s": samples / seconds, "max_staleness": eta,
        "staleness": staleness_histogram(run_dir),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16, help="steps per run; the first step of the async run fills the pipeline, so fewer steps weigh that more")
    parser.add_argument("--plays", type=int, default=16, help="plays per step (2 environments, half with the hint)")
    parser.add_argument("--ms-per-token", type=float, default=2.0)
    parser.add_argument("--capacity", type=int, default=0, help="the capacity reading's concurrent sequences (0: half the plays)")
    parser.add_argument("--readings", default=",".join(READINGS), help=f"which readings to run (of {', '.join(READINGS)})")
    args = parser.parse_args()
    readings = [r for r in args.readings.split(",") if r]
    unknown = sorted(set(readings) - set(READINGS))
    if unknown:
        parser.error(f"unknown readings {unknown}: use some of {', '.join(READINGS)}")
    capacity = args.capacity or max(1, args.plays // 2)
    from learner.tiny_model import build_tiny_model

    with tempfile.TemporaryDirectory(prefix="bench-async-") as tmp:
        root = Path(tmp)
        model = build_tiny_model(root / "tiny")
        seeds = root / "seeds"
        seeds.mkdir()
        manifest = []
        for skill in ("A", "B"):  # one file per skill: a seed's env id is its file name
            (seeds / f"one_shot_{skill}.py").write_text(ENV)
            manifest.append({"file": f"one_shot_{skill}.py", "skill": skill, "hint": "Either number may be right."})
        (seeds / "manifest.json").write_text(json.dumps(manifest))
        figures: dict[str, dict] = {}
        for reading in readings:
            limit = capacity if reading == "capacity" else 0
            learner_s = learner_step_seconds("batch" if reading == "batch" else "episode", args.plays, args.ms_per_token / 1000, 300, 1.0, 8192)
            print(f"[{reading}] workload: {args.steps} steps x {args.plays} plays, {args.ms_per_token} ms/token, "
                  f"log-normal(300, 1.0) <= 8192 tokens; learner step {learner_s:.2f} s"
                  + (f"; {limit} sequences decode at once" if limit else ""), flush=True)
            sync = run(f"sync-{reading}", 0, args, root, model, seeds, learner_s, limit)
            print(f"[{reading}] sync  (eta=0): {sync['samples']} samples in {sync['seconds']:.1f} s = {sync['samples_per_s']:.2f} samples/s", flush=True)
            asyn = run(f"async-{reading}", 4, args, root, model, seeds, learner_s, limit)
            print(f"[{reading}] async (eta=4): {asyn['samples']} samples ({asyn['dropped']} dropped as too stale) in {asyn['seconds']:.1f} s = {asyn['samples_per_s']:.2f} samples/s", flush=True)
            figures[reading] = {"learner_s": learner_s, "sync": sync, "async": asyn, "ratio": asyn["samples_per_s"] / sync["samples_per_s"]}
    line: dict = {"bench": "async", "target": 2.5}
    for reading, f in figures.items():
        prefix = "" if reading == "episode" else f"{reading}_reading_"
        line |= {
            f"{prefix}ratio": round(f["ratio"], 3),
            f"{prefix}sync_samples_per_s": round(f["sync"]["samples_per_s"], 3),
            f"{prefix}async_samples_per_s": round(f["async"]["samples_per_s"], 3),
            f"{prefix}learner_step_s": round(f["learner_s"], 3),
            f"{prefix}async_dropped_stale": f["async"]["dropped"],
            f"{prefix}async_staleness_histogram": f["async"]["staleness"],
            f"{prefix}sync_staleness_histogram": f["sync"]["staleness"],
        }
    if "batch" in figures:
        line["batch_reading_bound"] = 2.0
    if "capacity" in figures:
        line["capacity_reading_sequences"] = capacity
    line |= {"steps": args.steps, "plays_per_step": args.plays, "ms_per_token": args.ms_per_token}
    headline = line.pop("ratio", None)  # the episode reading; without it, the first reading run
    if headline is None:
        headline = line[f"{readings[0]}_reading_ratio"]
    print(json.dumps({"bench": "async", "ratio": headline, "target": 2.5} | line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
