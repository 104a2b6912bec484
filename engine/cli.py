"""`bin/spade-engine`: the command line.

    bin/spade-engine up [--steps N] [--preset NAME[,NAME...]] [--config FILE] [--set section.key=value ...]
                        [--model DIR] [--corpus FILE|DIR] [--run-dir DIR]
    bin/spade-engine worker --run-dir DIR          attach one more rollout worker to a running engine
    bin/spade-engine worker --connect tcp://HOST:PORT --key FILE   the same from another machine (no run directory)
    bin/spade-engine eval MODEL_OR_RUN_DIR [...] --suite rg-hard|math|science|code|envs   held-out evaluation
    bin/spade-engine validate FILE.py [--json]     validate an environment in the sandbox (exit 0 valid, 1 not)
    bin/spade-engine play FILE.py [--seed S] [--hint TEXT] [ACTION ...]
    bin/spade-engine replay RUN_DIR [--step N] [--role agent|designer] [--env ID] [--limit N]
    bin/spade-engine replay RUN_DIR --export FILE | --rescore [--set reward.K=V] | --train [--steps A:B] [--objective NAME]
    bin/spade-engine inspect RUN_DIR [--env ID | --trajectory KEY] [--skill S] [--verdict valid|rejected] [--sort FIELD]
    bin/spade-engine report RUN_DIR                plots and tables of a run in RUN_DIR/report.html

Imports stay light until a subcommand needs more, so `--help` answers at once. Everything a user can cause is a
`SpadeError` (engine/protocol/errors.py), caught in `main` alone and reported by `describe_failure`: one line
`error: ...`, exit 2 for bad input (config, path, store, model), 1 for a run that failed (a sandbox that cannot
start included); Ctrl-C stops every process of the run and exits 130. Any other exception is a bug of ours: its
traceback is printed with a line asking for a report. Paths are taken relative to the
directory the command was started in, and checked before anything is written.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
from pathlib import Path

from engine.protocol.errors import InputError, RunFailed, UsageError, describe_failure

UNBOUNDED_STEPS = 1_000_000  # run.steps under `up --minutes N` without --steps: the budget ends the run
from engine.protocol.paths import (
    BadPath,
    RunPaths,
    check_text_file,
    check_writable_dir,
    user_path,
)

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not a usage dump
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="spade-engine", description="SPADE self-play: an LLM designs environments and learns to solve them.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    up = sub.add_parser("up", help="run self-play (engine, learner and rollout workers)")
    up.add_argument("--steps", type=int, help="training steps (run.steps)")
    up.add_argument("--minutes", type=float, help="a wall-clock budget from the first step (run.minutes): no step starts "
                    "after it, the ones started finish, then the report; without --steps the run has no step limit")
    up.add_argument(
        "--preset", default="default",
        help="default (sized for 2 CPU cores), paper (the paper's schedule and the reference's choices, synchronous), "
        "paper-async (paper with the staleness bound 4), or an "
        "ablation overlay: no-corpus, no-memory, frozen-designer, solve-rate, learning-progress, two-skills, "
        "fixed-envs (with --set curriculum.fixed_envs=DIR); the baseline rlve (fixed environments, RLVE "
        "difficulty); tool-use (the tool-use setting's schedule); join with commas, e.g. paper,no-memory",
    )
    up.add_argument("--config", help="a TOML file of config sections")
    up.add_argument("--setting", choices=["games", "tool-use"], help="games (default) or tool-use: the designer writes "
                    "tool APIs and instructions, the agent calls tools (curriculum.setting, and the tool-use skills)")
    up.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override one config value")
    up.add_argument("--model", help="a local Hugging Face model folder, or a hub id such as Qwen/Qwen3-4B (fetched once "
                    "into the Hugging Face cache) (default: the embedded SmolLM2-135M-Instruct)")
    up.add_argument("--corpus", help="JSONL with `text`/`orig_doc`, or a folder of .txt files (default: shipped corpus)")
    up.add_argument("--run-dir", help="where the run writes everything (default: runs/<date-time>)")
    up.add_argument("--no-live", action="store_true", help="plain log lines instead of the live status line")
    up.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted run (its config, store and learner checkpoint)")

    # Its arguments are the worker's own (actors/worker.py parses them): `main` hands them over untouched.
    sub.add_parser("worker", add_help=False, help="attach an extra rollout worker to a running engine (worker --help)")
    # Likewise `eval` (actors/evaluation/cli.py parses its arguments).
    sub.add_parser("eval", add_help=False, help="evaluate models or run checkpoints on a held-out suite, side by side (eval --help)")

    validate = sub.add_parser("validate", help="validate an environment file in the sandbox")
    validate.add_argument("file")
    validate.add_argument("--json", action="store_true")

    play = sub.add_parser("play", help="play an environment in the sandbox (actions from the command line or typed)")
    play.add_argument("file")
    play.add_argument("--seed", type=int, default=None)
    play.add_argument("--hint", default=None)
    play.add_argument("actions", nargs="*")

    report = sub.add_parser("report", help="write RUN_DIR/report.html (plots and tables of a run)")
    report.add_argument("run_dir")

    replay = sub.add_parser("replay", help="read a run back from LMDB: print, --export, --rescore or --train it again")
    replay.add_argument("run_dir")
    mode = replay.add_mutually_exclusive_group()
    mode.add_argument("--export", metavar="FILE", help="every record with every field to FILE.jsonl (or FILE.parquet, with pyarrow)")
    mode.add_argument("--rescore", action="store_true", help="recompute rewards, advantages and metrics from the plays (with --set reward.*)")
    mode.add_argument("--train", action="store_true", help="train the stored batches again into new checkpoints (needs torch)")
    replay.add_argument("--step", type=int, default=None, help="print: only this step's trajectories")
    replay.add_argument("--role", choices=["agent", "designer"], default=None)
    replay.add_argument("--env", default=None)
    replay.add_argument("--limit", type=int, default=20)
    replay.add_argument("--tokens", action="store_true", help="also decode the token ids (needs the run's model)")
    replay.add_argument("--steps", metavar="A:B", help="--train: the steps whose batches to train (both included; A: to the end)")
    replay.add_argument("--objective", action="append", default=[], metavar="NAME", help="--train: run (the run's own), decoupled_ppo, tis or icepop; repeatable")
    replay.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="--rescore: reward.* and play.*; --train: learner.*")
    replay.add_argument("--out", help="--rescore: the JSONL file; --train: the folder (default: under RUN_DIR)")

    inspect = sub.add_parser("inspect", help="list a run's environments, or show one environment or one trajectory")
    inspect.add_argument("run_dir")
    inspect.add_argument("--env", metavar="ID", help="show this environment: code, hint, passage, validation report, plays")
    inspect.add_argument("--trajectory", metavar="KEY", help="show this trajectory (STEP/SAMPLE_ID or SAMPLE_ID) as a transcript")
    inspect.add_argument("--skill", help="list: only this skill")
    inspect.add_argument("--step", type=int, help="list: only environments made at this step")
    inspect.add_argument("--verdict", choices=["valid", "rejected", "all"], default="all", help="list: valid or rejected designs")
    inspect.add_argument("--source", choices=["designed", "seed", "all"], default="all")
    inspect.add_argument("--sort", default="step", help="list: step, skill, regret, reward, win or verdict (--desc reverses)")
    inspect.add_argument("--desc", action="store_true")
    inspect.add_argument("--limit", type=int, default=0, help="list: at most this many rows (0: all)")
    report.add_argument("--out", help="write the report here instead of RUN_DIR/report.html (for a read-only run)")
    return parser


def _overrides(args) -> list[str]:
    extra = list(args.set)
    if getattr(args, "setting", None) == "tool-use":  # before --set, which may still change the skills
        from engine.protocol.presets import TOOL_USE_SKILLS

        extra[:0] = ['curriculum.setting="tool_use"', f"curriculum.skills={json.dumps(TOOL_USE_SKILLS)}"]
    if args.steps is not None:
        extra.append(f"run.steps={args.steps}")
    if getattr(args, "minutes", None) is not None:
        extra.append(f"run.minutes={args.minutes}")
        if args.steps is None:
            extra.append(f"run.steps={UNBOUNDED_STEPS}")
    if args.model:
        extra.append(f"model.path={json.dumps(args.model)}")
    if args.corpus:
        extra.append(f"curriculum.corpus={json.dumps(args.corpus)}")
    if args.run_dir:
        extra.append(f"run.run_dir={json.dumps(args.run_dir)}")
    return extra


def _resolve_paths(config) -> None:
    """The config's paths, relative to where the command was started (the processes of the run start elsewhere)."""
    fields = (
        ("model", "path"), ("curriculum", "corpus"), ("curriculum", "seeds"), ("curriculum", "fixed_envs"),
        ("inference", "script"), ("run", "run_dir"), ("eval", "path"),
    )
    from engine.protocol.model_hub import is_hub_id

    for section, key in fields:
        part = getattr(config, section)
        value = getattr(part, key)
        if value and not ((section, key) == ("model", "path") and is_hub_id(value)):  # a hub id stays as it is
            setattr(part, key, str(user_path(value)))


def cmd_up(args) -> int:
    from engine.protocol.config_loading import dump_config, load_config
    from engine.curriculum import load_corpus
    from engine.tools.models import ModelError, check_model_folder, ensure_default_model, resolve_model_folder
    from engine.tools.node_plan import plan_node, record_plan

    if args.resume:
        return _resume(args)
    if args.config:
        check_text_file(user_path(args.config), "config file")
    config = load_config(args.preset, str(user_path(args.config)) if args.config else None, _overrides(args))
    _resolve_paths(config)
    load_corpus(config.curriculum.corpus or None)
    # A hub id is fetched once and stands for its snapshot folder from here on (config.toml and run.json name the
    # folder: the workers, the learner and --resume never go to the network).
    model_path = resolve_model_folder(config.model.path) if config.model.path else None
    model_given = config.model.path
    if model_path is not None:
        config.model.path = str(model_path)
    seeds = _seeds(config)
    run_dir = Path(config.run.run_dir or user_path(f"runs/{datetime.datetime.now():%Y%m%d-%H%M%S}"))
    check_writable_dir(run_dir, "run directory")
    paths = RunPaths(run_dir)
    if paths.config.exists():
        raise UsageError(f"run directory {run_dir} already holds a run (continue it with --resume {run_dir}, or choose another --run-dir)")
    if model_path is None:
        try:
            model_path = check_model_folder(ensure_default_model())
        except ModelError as exc:  # the embedded model, not one the user gave: the run failed, not its input
            raise RunFailed(str(exc)) from None
    plan = plan_node(config, model_path)  # before anything is written: a placement or a learner that cannot fit is one line
    with paths.engine_lock():
        paths.config.write_text(dump_config(config))
        paths.update_meta(model_path=str(model_path), started=datetime.datetime.now().isoformat(), argv=sys.argv[1:])
        record_plan(paths, plan)
        print(f"run directory: {paths.root}")
        print(f"model: {model_given} ({model_path})" if model_given and model_given != str(model_path) else f"model: {model_path}")
        return _run_engine(config, paths, seeds, live=not args.no_live)


def _seeds(config):
    from engine.curriculum import load_seeds
    from engine.protocol.paths import SEEDS_BY_SETTING, SEEDS_DIR

    default = SEEDS_BY_SETTING.get(config.curriculum.setting, SEEDS_DIR)
    return load_seeds(Path(config.curriculum.seeds) if config.curriculum.seeds else default)


def _run_dir(text: str) -> RunPaths:
    paths = RunPaths(user_path(text))
    if not paths.root.is_dir():
        raise BadPath(f"run directory {paths.root} does not exist")
    if not paths.config.is_file():
        raise BadPath(f"{paths.root} is not a run directory (no config.toml)")
    return paths


def _check_resumable(paths: RunPaths) -> None:
    """A store to resume from: present, not empty, and not older than the learner's checkpoint (which would
    silently start the curriculum again on top of trained weights)."""
    from storage.store import Store

    if not (paths.store / "data.mdb").is_file():
        raise InputError(f"{paths.root} has no store ({paths.store / 'data.mdb'} is missing): it cannot be resumed; start a new run")
    store = Store.open(paths.store, readonly=True)
    try:
        state = store.state()
    finally:
        store.close()
    checkpoint = paths.checkpoint_version()
    if checkpoint is not None and state.batches < checkpoint:
        raise InputError(
            f"the store in {paths.store} records {state.batches} training batches but the learner's checkpoint is at "
            f"policy v{checkpoint}: the store is older than the checkpoint (restored from a backup?); restore the "
            "matching store, or start a new run"
        )


def _resume(args) -> int:
    from engine.protocol.config_loading import dump_config, read_config_file
    from engine.tools.node_plan import plan_node, record_plan

    if args.config or args.model or args.corpus or args.run_dir or args.preset != "default":
        raise UsageError("--resume keeps the run's own config: only --steps, --minutes and --set may change it")
    paths = _run_dir(args.resume)
    extra = list(args.set) + ([f"run.steps={args.steps}"] if args.steps is not None else [])
    if args.minutes is not None:  # a new budget, counted from the restart
        extra.append(f"run.minutes={args.minutes}")
    config = read_config_file(paths.config, extra)
    seeds = _seeds(config)
    check_writable_dir(paths.root, "run directory")
    _check_resumable(paths)
    plan = plan_node(config, paths.read_meta().model_path)
    with paths.engine_lock():
        paths.config.write_text(dump_config(config))
        record_plan(paths, plan)
        print(f"resuming run directory: {paths.root}")
        return _run_engine(config, paths, seeds, live=not args.no_live)


def _run_engine(config, paths, seeds, *, live: bool) -> int:
    """Run the engine to the end; the caller holds the run directory's engine lock. However it ends, the live line
    is cleared, every child stopped and the run summarised before `main` says why it stopped (everything committed
    stays in the store)."""
    import trio

    from engine.metrics.live import LiveView
    from engine.protocol.lifeline import cancel_on_signal
    from engine.run import Engine
    from engine.tools.summary import print_summary

    view = LiveView(config.run.steps, enabled=None if live else False, minutes=config.run.minutes)
    engine = Engine(config, paths, seeds, view=view)
    interrupted = []

    async def run_until_ctrl_c() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_on_signal, nursery.cancel_scope, signal.SIGINT, lambda: interrupted.append(True))
            await engine.run()
            nursery.cancel_scope.cancel()

    try:
        trio.run(run_until_ctrl_c)
        if interrupted:  # said as every entry point says it (engine/protocol/errors.py): "interrupted", exit 130
            raise KeyboardInterrupt
    finally:
        view.close()
        engine.stop_children()
        print_summary(paths)
    return 0


def _environment_file(text: str) -> str:
    path = user_path(text)
    check_text_file(path, "environment file")
    return str(path)


def cmd_validate(args) -> int:
    from actors.environment_cli import validate_main

    return validate_main(_environment_file(args.file), args.json)


def cmd_play(args) -> int:
    from actors.environment_cli import play_main

    return play_main(_environment_file(args.file), args.seed, args.hint, args.actions)


def cmd_report(args) -> int:
    paths = _run_dir(args.run_dir)
    if args.out:
        out = user_path(args.out)
        check_writable_dir(out.parent, "report folder")
        if out.exists() and not os.access(out, os.W_OK):
            raise BadPath(f"{out} cannot be written (read-only): write the report elsewhere with --out FILE")
        return _write_report(paths, out)
    out = paths.report
    try:
        check_writable_dir(out.parent, "report folder")
        if out.exists() and not os.access(out, os.W_OK):
            raise BadPath(f"{out} is read-only")
    except BadPath:  # a read-only or archived run: the report goes to the user's own folder instead
        out = _user_report_path(paths)
        print(f"{paths.report} cannot be written (read-only run): the report goes to {out} (--out FILE to choose)", file=sys.stderr)
    return _write_report(paths, out)


def _write_report(paths, out: Path) -> int:
    """The report written; a store with damaged records is listed in it and fails the command in one line."""
    from engine.tools.report import write_report
    from storage.records import StoredRecordError
    from storage.scan import damage_line

    problems: list = []
    print(f"wrote {write_report(paths, out, problems)}")
    if problems:
        raise StoredRecordError(f"{damage_line(paths.store, problems)} (the report lists them: {out})")
    return 0


def _user_report_path(paths) -> Path:
    """Where the report of a run that cannot be written goes: $XDG_CACHE_HOME (else ~/.cache)/spade-engine/reports/,
    else the temporary folder; one file per run, named after its folder and a hash of its full path."""
    import hashlib
    import tempfile

    tag = hashlib.sha256(str(paths.root.resolve()).encode()).hexdigest()[:8]
    name = f"{paths.root.resolve().name}-{tag}-report.html"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "spade-engine" / "reports"
    for folder in (cache, Path(tempfile.gettempdir()) / "spade-engine-reports"):
        try:
            check_writable_dir(folder, "report folder")
            folder.mkdir(parents=True, exist_ok=True)
            return folder / name
        except (BadPath, OSError):
            continue
    raise BadPath(f"{paths.report} cannot be written and neither can {cache} nor the temporary folder: write it with --out FILE")


def cmd_replay(args) -> int:
    from engine.tools import replay

    paths = _run_dir(args.run_dir)
    args.run_dir = str(paths.root)
    mode = "--train" if args.train else "--rescore" if args.rescore else "--export" if args.export else ""
    for option, given, modes in (("--steps", args.steps, ("--train",)), ("--objective", args.objective, ("--train",)),
                                 ("--set", args.set, ("--train", "--rescore")), ("--out", args.out, ("--train", "--rescore"))):
        if given and mode not in modes:
            raise UsageError(f"{option} goes with {' or '.join(modes)}")
    if args.export:
        out = user_path(args.export)
        check_writable_dir(out.parent, "export folder")
        args.export = str(out)
        return replay.export_main(args)
    if args.rescore:
        from engine.protocol.config_loading import read_config_file

        bad = [s for s in args.set if not s.startswith(("reward.", "play."))]
        if bad:
            raise UsageError(f"--set {bad[0]}: --rescore recomputes rewards, so it changes reward.* and play.* settings")
        config = read_config_file(paths.config, args.set)
        out = user_path(args.out) if args.out else paths.root / "rescore" / f"rescore-{config.reward.designer_reward}.jsonl"
        check_writable_dir(out.parent, "rescore folder")
        out.parent.mkdir(parents=True, exist_ok=True)
        return replay.rescore_main(args, config, out)
    if args.train:
        out = user_path(args.out) if args.out else replay.default_train_out(paths)
        check_writable_dir(out, "replay folder")
        file = replay.export_train_batches(paths, args.steps, out)
        from learner.replay import main as train_main  # torch: only for --train

        extra = [x for o in args.objective for x in ("--objective", o)] + [x for s in args.set for x in ("--set", s)]
        return train_main(["--batches", str(file), "--out", str(out), *extra])
    return replay.print_main(args)


def cmd_inspect(args) -> int:
    from engine.tools.inspector import inspect_main

    return inspect_main(_run_dir(args.run_dir), args)


COMMANDS = {"up": cmd_up, "validate": cmd_validate, "play": cmd_play, "replay": cmd_replay, "inspect": cmd_inspect, "report": cmd_report}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["worker"]:
            from actors.worker import main as worker_main

            return worker_main(argv[1:], prog="spade-engine worker")
        if argv[:1] == ["eval"]:
            from actors.evaluation.cli import main as eval_main
            from engine.tools.models import ensure_default_model

            return eval_main(argv[1:], prog="spade-engine eval", default_model=lambda: str(ensure_default_model()))
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra and args.command == "play" and not any(x.startswith("--") for x in extra):
            args.actions += extra  # actions given after --seed/--hint (argparse stops taking positionals there)
        elif extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        return COMMANDS[args.command](args)
    except SystemExit:  # --help
        raise
    except BaseException as exc:  # the one place a command's failure is reported (trio's exception groups included)
        from engine.protocol.transport import PeerGone  # a peer gone after its own failure: that failure is the cause

        text, code = describe_failure(exc, consequences=(PeerGone,))
        print(text, file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
