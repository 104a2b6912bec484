"""Evaluation benchmark: `spade-engine eval` on its default backend against `--backend transformers`, same probe.

    bin/bench eval [--episodes 8 --models 2 --turns N --max-tokens N --concurrency N]

The probe is the one issue 22's learning runs use: every shipped seed environment (`--suite envs`), `episodes`
episodes each, both arms (`--hinted`), played with the default run's own turn and token budgets (`[play]`
max_turns, agent_max_tokens: 3 turns of at most 48 tokens), on `models` models: the embedded SmolLM2-135M-Instruct and copies of it in
their own folders (what a probe of an initial and a final checkpoint costs; the weights being equal does not change
the work). Each backend runs the whole command, start-up (loading, vLLM's compile) included, as a user waits for it;
each one's playing time (first episode's start to last one's end, per model) and that ratio are reported too. Runs from .venv-vllm, where `auto` resolves to
vLLM (made by `bin/test --vllm`, or by this script). Ends with one JSON line whose `ratio` is the transformers
command's wall time over the default's (target 3).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from _vllm_venv import reexec_in_vllm_venv  # noqa: E402 (this folder is sys.path[0])
TARGET = 3.0
SEEDS = REPO / "engine" / "protocol" / "data" / "seeds"  # the shipped seed environments, with their hints


def _eval(backend: str, models: list[str], out: Path, args) -> dict:
    command = [sys.executable, "-m", "engine.cli", "eval", *models, "--suite", "envs", "--file", str(SEEDS), "--hinted", "--episodes", str(args.episodes),
               "--backend", backend, "--out", str(out), "--json"]
    for flag, value in (("--turns", args.turns), ("--max-tokens", args.max_tokens), ("--concurrency", args.concurrency)):
        if value:
            command += [flag, str(value)]
    print(f"[bench eval] {backend}: {' '.join(command[3:])}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"eval --backend {backend} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    playing = 0.0  # per model, from its first episode's start to its last one's end: the time without start-up
    for model in {r["model"] for r in rows}:
        mine = [r for r in rows if r["model"] == model]
        playing += max(r["time"] for r in mine) - min(r["time"] - r["seconds"] for r in mine)
    return {"wall_s": round(wall, 1), "episodes": len(rows), "episodes_per_s": round(len(rows) / wall, 3),
            "play_s": round(playing, 1), "backends": sorted({r["model"].split(":", 1)[0] for r in rows}),
            "table": json.loads(result.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--models", type=int, default=2)
    parser.add_argument("--turns", type=int, default=0, help="turns per episode (default: the default run's play.max_turns)")
    parser.add_argument("--max-tokens", type=int, default=0, help="new tokens per turn (default: the default run's play.agent_max_tokens)")
    parser.add_argument("--concurrency", type=int, default=0, help="episodes in flight (default: inference.concurrency)")
    args = parser.parse_args()
    reexec_in_vllm_venv(__file__)
    from engine.protocol.config import PlayConfig

    args.turns = args.turns or PlayConfig().max_turns
    args.max_tokens = args.max_tokens or PlayConfig().agent_max_tokens
    from engine.tools.models import ensure_default_model

    base = Path(ensure_default_model())
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as scratch:
        scratch = Path(scratch)
        models = [str(base)]
        for i in range(1, args.models):
            copy = scratch / f"model-{i}"
            shutil.copytree(base, copy)
            models.append(str(copy))
        fast = _eval("auto", models, scratch / "auto", args)
        slow = _eval("transformers", models, scratch / "transformers", args)
    ratio = slow["wall_s"] / fast["wall_s"] if fast["wall_s"] > 0 else 0.0
    print(json.dumps({
        "bench": "eval", "ratio": round(ratio, 2), "target": TARGET, "episodes": fast["episodes"], "models": args.models,
        "default_backend": fast["backends"], "default_wall_s": fast["wall_s"], "transformers_wall_s": slow["wall_s"],
        "default_episodes_per_s": fast["episodes_per_s"], "transformers_episodes_per_s": slow["episodes_per_s"],
        "default_play_s": fast["play_s"], "transformers_play_s": slow["play_s"],
        "ratio_without_start_up": round(slow["play_s"] / fast["play_s"], 2) if fast["play_s"] > 0 else None,
        "default_table": fast["table"], "transformers_table": slow["table"],
    }))


if __name__ == "__main__":
    main()
