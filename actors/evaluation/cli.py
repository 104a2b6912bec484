"""`bin/spade-engine eval MODEL_OR_RUN_DIR [MORE ...] --suite NAME`: held-out evaluation, models side by side.

    bin/spade-engine eval default --suite rg-hard --episodes 1 --datasets chain_sum,maze   # the embedded model
    bin/spade-engine eval runs/X@initial runs/X --suite rg-hard --episodes 1 --datasets chain_sum,maze
    bin/spade-engine eval MODEL_DIR --suite math --file aime.jsonl --out evals/aime
    bin/spade-engine eval runs/X --suite envs --file probe_envs/ --checkpoint step-000040

A model is a Hugging Face folder or a run directory: RUN_DIR means its latest checkpoint (checkpoints/latest),
`RUN_DIR@NAME` (or `--checkpoint NAME` for every run directory) the checkpoint folder NAME, and NAME `initial` the
run's base model (run.json model_path). Results go to OUT/results.jsonl as each episode ends (default OUT:
evals/SUITE), keyed by (model, suite, dataset, episode): the same command again skips what is done, so an
interrupted evaluation (Ctrl-C) continues where it stopped. The table (markdown on stdout, OUT/table.md and
OUT/table.json) puts the models side by side with 95% intervals and the family averages.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from actors.evaluation.results import ResultsFile
from actors.evaluation.runner import ModelRef, Progress, evaluate_model
from actors.evaluation.suites import SUITES, load_suite
from actors.evaluation.table import build_table, markdown
from engine.protocol.errors import InputError, describe_failure, leaf_exceptions
from engine.protocol.model_hub import fetch_hub_model, is_hub_id
from engine.protocol.paths import read_checkpoint_version
from engine.protocol.run_meta import RunMetaError, require_model_path

BACKENDS = ("auto", "transformers", "vllm", "scripted", "oracle", "copy", "random")


class EvalInputError(InputError):
    pass


def resolve_model(text: str, checkpoint: str | None, default_model=None) -> tuple[str, str]:
    """(label, model folder) of a MODEL_OR_RUN_DIR[@NAME] argument (`default`: the embedded model, via `default_model`;
    a Hugging Face hub id such as Qwen/Qwen3-4B: its snapshot in the Hugging Face cache, fetched once)."""
    if text == "default" and not Path(text).exists():
        if default_model is None:
            raise EvalInputError("`default` (the embedded SmolLM2-135M-Instruct) is known to `bin/spade-engine eval` only")
        return "SmolLM2-135M-Instruct", str(Path(default_model()).resolve())
    if is_hub_id(text):
        folder = fetch_hub_model(text, say=lambda line: print(line, file=sys.stderr, flush=True))
        if not (folder / "config.json").is_file():
            raise EvalInputError(f"{text}: the Hugging Face cache's snapshot {folder} has no config.json (not a transformers model?)")
        return text, str(folder)
    base, _, name = text.rpartition("@") if "@" in text and not Path(text).exists() else (text, "", "")
    root = Path(base).expanduser().resolve()
    if not root.is_dir():
        raise EvalInputError(f"{text}: {root} is not a folder (give a model folder or a run directory)")
    if not (root / "config.toml").is_file():  # a model folder
        if name:
            raise EvalInputError(f"{text}: @{name} is for run directories; {root} is not one (no config.toml)")
        if not (root / "config.json").is_file():
            raise EvalInputError(f"{text}: {root} is neither a run directory (config.toml) nor a model folder (config.json)")
        return root.name, str(root)
    name = name or checkpoint or "latest"
    if name == "initial":
        try:
            model = require_model_path(root / "run.json")
        except RunMetaError as exc:
            raise EvalInputError(f"{text}: {exc}") from None
        return f"{root.name}@initial", str(Path(model).resolve())
    folder = (root / "checkpoints" / name).resolve()
    if not (folder / "config.json").is_file():
        known = sorted(p.name for p in (root / "checkpoints").glob("*") if p.is_dir() and not p.name.startswith(".")) if (root / "checkpoints").is_dir() else []
        raise EvalInputError(f"{text}: no checkpoint {name!r} in {root / 'checkpoints'} (known: {', '.join(known) or 'none'}; or @initial)")
    version = read_checkpoint_version(folder)
    return f"{root.name}@{name if name != 'latest' else folder.name}" + (f" (v{version})" if version is not None else ""), str(folder)


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Evaluate models or run checkpoints on a held-out suite, side by side.")
    p.add_argument("models", nargs="+", metavar="MODEL_OR_RUN_DIR", help="a model folder, `default` (the embedded model), RUN_DIR (latest checkpoint) or RUN_DIR@NAME (NAME: a checkpoint folder or `initial`)")
    p.add_argument("--suite", required=True, choices=SUITES)
    p.add_argument("--file", "--dir", dest="file", help="math/science/code: a JSONL file (default: the shipped example); envs: a folder of environments")
    p.add_argument("--checkpoint", help="the checkpoint of every RUN_DIR given without @NAME (default latest; `initial`: the base model)")
    p.add_argument("--out", help="results folder (default evals/SUITE); results.jsonl there makes a rerun resume")
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="auto (as `up`): vllm where it imports, else "
                   "transformers; oracle: answers with the reference (tests); copy / random: chance players for games "
                   "(the printed example, a uniform listed choice; actors/evaluation/chance.py)")
    p.add_argument("--script", help="--backend scripted: a JSON file {designer, hint, agent} of completions")
    p.add_argument("--episodes", type=int, help="episodes per dataset (rg-hard, envs) or samples per question")
    p.add_argument("--datasets", help="rg-hard: only these datasets, comma-separated")
    p.add_argument("--turns", type=int, help="turns per episode")
    p.add_argument("--max-tokens", type=int, help="new tokens per turn")
    p.add_argument("--temperature", type=float)
    p.add_argument("--concurrency", type=int, help="episodes in flight at once (default: inference.concurrency, 32): every "
                   "episode of every dataset is started, up to this many at a time")
    p.add_argument("--ci", choices=["wilson", "bootstrap"], default="wilson")
    p.add_argument("--per-dataset", action="store_true", help="one row per dataset too")
    p.add_argument("--hinted", action="store_true", help="envs: also play each environment with the hint its manifest.json "
                   "gives (the families are then the arms: no_hint and hint)")
    p.add_argument("--json", action="store_true", help="print the table as JSON instead of markdown")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="a config value (model.dtype, sandbox.step_timeout_s, inference.max_batch ...)")
    return p


def _config(args):
    from engine.protocol.config_loading import load_config

    overrides = list(args.set)
    if args.backend in ("transformers", "vllm", "scripted"):
        overrides.append(f"inference.backend={args.backend}")
    if args.backend == "scripted":
        if not args.script:
            raise EvalInputError("--backend scripted needs --script FILE.json")
        overrides.append(f"inference.script={json.dumps(str(Path(args.script).resolve()))}")
    return load_config("default", None, overrides)


def _concurrency(args, config) -> int:
    return max(1, args.concurrency if args.concurrency is not None else config.inference.concurrency)


def _backend_name(args, config) -> str:
    """The backend that plays, with `auto` resolved as `up` resolves it (results are keyed by it)."""
    if args.backend != "auto":
        return args.backend
    from actors.inference.factory import backend_kind

    return backend_kind(config)


def _play_config(config, suite):
    import msgspec

    s = suite.settings
    return msgspec.structs.replace(
        config.play, agent_max_tokens=s.max_tokens, agent_temperature=s.temperature, max_turns=s.max_turns,
        max_context_tokens=max(config.play.max_context_tokens, 32768),
    )


def _make_backend(args, config):
    def make(path: str):
        if args.backend == "oracle":
            from actors.evaluation.oracle import OracleBackend

            return OracleBackend(path)
        if args.backend in ("copy", "random"):
            from actors.evaluation.chance import ChanceBackend

            return ChanceBackend(path, args.backend, seed=config.run.seed)
        import torch

        from actors.inference.factory import build_backend

        torch.set_num_threads(config.inference.threads or os.cpu_count() or 1)
        return build_backend(config, path)

    return make


async def _interrupts(scope, state: dict, progress) -> None:
    """Ctrl-C: stop after the generation in flight (every finished episode is on disk); twice: stop at once."""
    import trio

    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async for _ in signals:
            if state["interrupted"]:
                progress.note("interrupted again: stopping at once")
                os._exit(130)
            state["interrupted"] = True
            progress.note("interrupted: stopping after the generation in flight (Ctrl-C again to stop at once)")
            scope.cancel()


async def _evaluate(models, suite, results, args, config, progress, state: dict) -> None:
    import trio

    from actors.reasoning_gym.process import ReasoningGymProcess

    rg = ReasoningGymProcess() if suite.name == "rg-hard" else None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_interrupts, nursery.cancel_scope, state, progress)
            for model in models:
                await evaluate_model(model, suite, results, make_backend=_make_backend(args, config), config=config,
                                     play_config=_play_config(config, suite), concurrency=_concurrency(args, config),
                                     progress=progress, rg=rg)
            nursery.cancel_scope.cancel()
    finally:
        if rg is not None:
            rg.close()


def run(args, default_model=None) -> int:
    import trio

    suite = load_suite(args.suite, path=args.file, episodes=args.episodes, max_turns=args.turns, max_tokens=args.max_tokens,
                       temperature=args.temperature, datasets=[d.strip() for d in args.datasets.split(",") if d.strip()] if args.datasets else None,
                       hinted=getattr(args, "hinted", False))
    config = _config(args)
    args.backend = _backend_name(args, config)
    models = []
    for text in args.models:
        label, path = resolve_model(text, args.checkpoint, default_model)
        models.append(ModelRef(id=f"{args.backend}:{path}", label=label, path=path))
    if len({m.id for m in models}) < len(models):
        raise EvalInputError("the same model is given twice")
    out = Path(args.out or f"evals/{args.suite}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = ResultsFile(out / "results.jsonl")
    todo = sum(1 for m in models for i in suite.items if not results.done((m.id, suite.key, i.dataset, i.episode)))
    progress = Progress(todo)
    done_before = len(models) * len(suite.items) - todo
    progress.note(f"eval {suite.name}: {len(models)} model(s) x {len(suite.items)} episodes; {done_before} already in "
                  f"{results.path}, {todo} to play")
    state = {"interrupted": False}
    try:
        trio.run(_evaluate, models, suite, results, args, config, progress, state)
    except BaseException as exc:  # Ctrl-C still writes the table of what finished; anything else goes to main
        leaves = leaf_exceptions(exc)
        if not any(isinstance(e, KeyboardInterrupt) for e in leaves):
            raise
        state["interrupted"] = True
    finally:
        results.close()
    interrupted = state["interrupted"]
    table = build_table(results.select([m.id for m in models], suite.key), models=[(m.id, m.label) for m in models],
                        suite=suite, ci=args.ci, per_dataset=args.per_dataset)
    text = markdown(table)
    (out / "table.md").write_text(text + "\n")
    (out / "table.json").write_text(json.dumps(table, indent=2) + "\n")
    print(json.dumps(table, indent=2) if args.json else text)
    if interrupted:
        print(f"\ninterrupted: {progress.done} episodes finished now are kept in {results.path}; run the same command "
              "again to continue", file=sys.stderr)
        return 130
    return 0


def main(argv: list[str] | None = None, prog: str = "actors.evaluation", default_model=None) -> int:
    """The command line; `default_model()` gives the embedded model's folder (engine/cli.py passes it)."""
    args = build_parser(prog).parse_args(argv)
    try:
        return run(args, default_model)
    except BaseException as exc:  # reported as every entry point reports (engine/protocol/errors.py)
        text, code = describe_failure(exc)
        print(text, file=sys.stderr)
        return code
