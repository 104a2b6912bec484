"""`bin/spade-engine replay RUN_DIR`: a run read back from LMDB, in four modes.

    replay RUN_DIR [--step N] [--role R] [--env ID] [--limit N] [--tokens]   print stored trajectories
    replay RUN_DIR --export FILE.jsonl|FILE.parquet                          every record, every field (engine/tools/export.py)
    replay RUN_DIR --rescore [--set reward.designer_reward=regret] [--out F] rewards recomputed (engine/tools/rescore.py)
    replay RUN_DIR --train [--steps A:B] [--objective NAME ...] [--out DIR]  the learner's updates again (learner/replay.py)

Every mode opens the store read-only: LMDB readers never block the engine's writer, so all of them work while the run
is going, and on a read-only copy of a finished one. Every record is checked (storage/scan.py check_records): with
damaged ones a command does what it can, then names the first in one line and exits 2.

`--train` is split at the package rule: the learner never reads the store. This module writes the selected batches,
as the engine sent them (`TrainBatch`: samples with their stored behaviour log-probs, versions and advantages),
to OUT/batches.msgpack together with the checkpoint to start from; learner/replay.py (torch) reads that file.
The start is the newest checkpoint at or before the first selected batch's policy version (the base model for
version 0); the batches between it and the first selected one are replayed too, with the run's own settings, so
the compared updates start from exactly the weights the live run had.
"""

from __future__ import annotations

import time
from pathlib import Path

from engine.protocol.errors import InputError, UsageError
from engine.protocol.messages import TrainBatch
from engine.protocol.paths import RunPaths, read_checkpoint_version
from engine.protocol.replay_batches import ReplayBatches, write_batches
from storage.records import StoredRecordError
from storage.scan import check_records, damage_line, tolerant, tolerant_get, trajectories
from storage.store import Store, StoreMissing


def open_store(paths: RunPaths, skipped: list[StoredRecordError]) -> Store:
    """The run's store, read-only, with every record checked first (storage/scan.py check_records): the damaged
    ones go to `skipped`, and `report_skipped` ends the command with them (a damaged run never reads as empty)."""
    try:
        store = Store.open(paths.store, readonly=True)
    except StoreMissing as exc:
        raise UsageError(str(exc)) from None
    try:
        skipped.extend(check_records(store))
    except BaseException:
        store.close()
        raise
    return store


def report_skipped(skipped: list[StoredRecordError], paths: RunPaths) -> None:
    """After the command did what it could: damaged records end it in one line naming the first (exit 2)."""
    if skipped:
        raise StoredRecordError(damage_line(paths.store, skipped))


def print_main(args) -> int:
    from engine.metrics.observations import load_tokenizer

    paths = RunPaths(args.run_dir)
    tokenizer = None
    if args.tokens:
        tokenizer = load_tokenizer(paths.read_model_path())
        if tokenizer is None:
            raise UsageError(f"--tokens needs the run's tokenizer, and {Path(paths.read_model_path()) / 'tokenizer.json'} cannot be read")
    shown, skipped = 0, []
    store = open_store(paths, skipped)
    try:
        for t in trajectories(store, skipped, args.step):
            if (args.role and t.role != args.role) or (args.env and t.env_id != args.env):
                continue
            print(f"step {t.step} {t.role:8s} {t.arm:7s} env {t.env_id} status {t.status} return {t.episode_return:+.2f} tokens {len(t.sample.tokens) // 4}")
            for i, turn in enumerate(t.turns):
                print(f"    turn {i + 1}: action {turn.action[:80]!r} ({turn.parse_rule}) reward {turn.reward:+.2f} v{turn.policy_version}")
            if t.failure:
                print(f"    failure: {t.failure[:200]}")
            if tokenizer is not None:
                from engine.protocol.messages import unpack_ints

                print("    text: " + tokenizer.decode(unpack_ints(t.sample.tokens).tolist(), skip_special_tokens=False)[-2000:].replace("\n", "\n          "))
            shown += 1
            if shown >= args.limit:
                break
        state = tolerant_get(store, "meta", "state", skipped)
        done = state.steps_done if state is not None else 0
    finally:
        store.close()
    report_skipped(skipped, paths)
    if shown == 0:
        held = f" (it holds steps 0 to {done - 1})" if done else " (it holds no step yet)"
        raise InputError(f"no trajectories match {_filters(args)} in {paths.store}{held}")
    return 0


def _filters(args) -> str:
    given = [f"--step {args.step}" if args.step is not None else "", f"--role {args.role}" if args.role else "", f"--env {args.env}" if args.env else ""]
    return " ".join(g for g in given if g) or "(no filter)"


def export_main(args) -> int:
    from engine.tools.export import export_run

    paths, skipped = RunPaths(args.run_dir), []
    store = open_store(paths, skipped)
    try:
        written = export_run(store, Path(args.export), skipped)
    finally:
        store.close()
    for file in written:
        print(f"wrote {file}")
    report_skipped(skipped, paths)
    return 0


def rescore_main(args, config, out: Path) -> int:
    from engine.tools.rescore import rescore, summary_lines, write_rows

    paths, skipped = RunPaths(args.run_dir), []
    store = open_store(paths, skipped)
    try:
        rows = rescore(store, config, skipped)
    finally:
        store.close()
    report_skipped(skipped, paths)
    if not rows:
        raise InputError(f"{paths.store} holds no plays to rescore")
    for line in summary_lines(rows):
        print(line)
    write_rows(rows, out)
    print(f"wrote {out}")
    return 0


# ---------------------------------------------------------------- --train: the engine's half
def parse_steps(text: str | None) -> tuple[int, int | None]:
    """`A:B` (both included), `A:` (A to the end), `A` (just A); None: everything."""
    if text is None:
        return 0, None
    first, sep, last = text.partition(":")
    try:
        a = int(first) if first else 0
        b = (int(last) if last else None) if sep else a
    except ValueError:
        raise UsageError(f"--steps {text}: expected A:B, A: or A (step numbers, counted from 0 as `replay --step` does)") from None
    if a < 0 or (b is not None and b < a):
        raise UsageError(f"--steps {text}: the range must run forward from step 0 or later")
    return a, b


def checkpoints(paths: RunPaths) -> dict[int, Path]:
    """The run's learner checkpoints by policy version (an incomplete or foreign folder is left out)."""
    found = {}
    for folder in sorted(paths.checkpoints.glob("step-*")) if paths.checkpoints.is_dir() else []:
        version = read_checkpoint_version(folder)
        if version is not None:
            found[version] = folder
    return found


def export_train_batches(paths: RunPaths, steps: str | None, out: Path) -> Path:
    """Write OUT/batches.msgpack for learner/replay.py (engine/protocol/replay_batches.py): the batches from the
    start checkpoint's version on."""
    from engine.batches import MissingTrajectory, stored_batch_samples

    a, b = parse_steps(steps)
    skipped: list[StoredRecordError] = []
    store = open_store(paths, skipped)
    try:
        records = sorted(tolerant(store, "batches", skipped), key=lambda r: r.version)
        chosen = [r for r in records if r.step >= a and (b is None or r.step <= b)]
        if not chosen:
            held = sorted({r.step for r in records})
            raise InputError(f"no stored batch for --steps {steps} in {paths.store} (batches of steps {held[0]} to {held[-1]})" if held else f"{paths.store} holds no training batch yet")
        first = chosen[0].version
        saved = {v: f for v, f in checkpoints(paths).items() if v <= first}
        start = max(saved, default=0)
        batches = []
        for record in records:
            if start <= record.version <= chosen[-1].version:
                try:
                    samples = stored_batch_samples(store, record)
                except (MissingTrajectory, StoredRecordError) as exc:
                    raise InputError(f"batch {record.version} (step {record.step}) cannot be replayed: {exc}") from None
                batches.append((record.version, TrainBatch(step=record.step, samples=samples, checkpoint=False, sample_norm=record.sample_norm)))
    finally:
        store.close()
    report_skipped(skipped, paths)
    out.mkdir(parents=True, exist_ok=True)
    file = out / "batches.msgpack"
    write_batches(file, ReplayBatches(
        run_dir=str(paths.root), model_path=paths.read_model_path(), start_version=start,
        checkpoint=str(saved[start]) if start in saved else "", first_version=first, batches=batches,
    ))
    return file


def default_train_out(paths: RunPaths) -> Path:
    return paths.root / "replays" / f"train-{time.strftime('%Y%m%d-%H%M%S')}"
