"""`replay --train`, the learner's half: the run's updates trained again from its stored batches, into new
checkpoints, to compare objectives or settings on the same data.

    bin/spade-engine replay RUN_DIR --train [--steps A:B] [--objective NAME ...] [--set learner.K=V ...] [--out DIR]
    python -m learner.replay --batches OUT/batches.msgpack --out OUT [--objective NAME ...] [--set ...]

The engine side (engine/tools/replay.py `export_train_batches`) reads the store and writes OUT/batches.msgpack: the
batches as `TrainBatch`es (samples with the behaviour log-probs, policy versions and advantages of the live run),
each with the policy version that trained it, and the checkpoint to start from. Here, for each objective (default:
the run's own, labelled `run`): a `Trainer` is built from the run's config, loads that checkpoint (weights,
optimizer, scheduler, RNG: learner/checkpoint.py), replays the batches before the first selected one with the
run's own learner settings (so the compared updates start from the live run's weights), then trains the selected
ones with `learner.objective.name = NAME` and the `--set learner.*` overrides. `--set` changes what
`Trainer.update` reads (objective, aggregation, mini-batches, role weights); the optimizer's own hyper-parameters
come from the checkpoint. Each objective writes OUT/NAME/metrics.jsonl (one row per batch: step, version, the
replayed metrics, `live_loss` from the run's metrics.jsonl) and a checkpoint OUT/NAME/step-NNNNNN after its last
batch; the table printed at the end compares the losses. With the run's own objective the replayed loss equals
the live one (tests/e2e/test_replay.py: within 1e-5). Nothing of the run is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import msgspec

from engine.protocol.config import OBJECTIVES
from engine.protocol.config_loading import read_config_file
from engine.protocol.errors import InputError, describe_failure
from engine.protocol.metrics_file import read_rows
from engine.protocol.paths import RunPaths
from engine.protocol.replay_batches import ReplayBatches, read_batches


def live_losses(paths: RunPaths) -> dict[int, float]:
    """The live run's loss of the update trained by each policy version (its row carries the version it made)."""
    losses = {}
    for row in read_rows(paths.metrics):
        if "policy_version" in row:
            losses[int(row["policy_version"]) - 1] = float(row.get("learner", {}).get("loss", row.get("learner_loss", 0.0)))
    return losses


def replay_objective(data: ReplayBatches, config, label: str, overrides: list[str], out: Path) -> list[dict]:
    import torch

    from learner.trainer import Trainer

    paths = RunPaths(data.run_dir)
    run_learner = config.learner
    replay_config = read_config_file(paths.config, overrides).learner
    if label != "run":
        replay_config = msgspec.structs.replace(replay_config, objective=msgspec.structs.replace(replay_config.objective, name=label))
    torch.set_num_threads(run_learner.threads or max(1, os.cpu_count() or 1))
    trainer = Trainer(data.model_path, replay_config, seed=config.run.seed, dtype=config.model.dtype)
    if data.checkpoint:
        trainer.load_checkpoint(Path(data.checkpoint))
    if trainer.version != data.start_version:
        raise InputError(f"{data.checkpoint or data.model_path} is at policy v{trainer.version}, the batch file expects v{data.start_version}")
    live = live_losses(paths)
    rows, folder = [], out / label
    folder.mkdir(parents=True, exist_ok=True)
    for version, batch in data.batches:
        compared = version >= data.first_version
        trainer.config = replay_config if compared else run_learner  # the run's own settings up to the first compared batch
        metrics = trainer.update(batch.samples)
        trainer.version += 1  # as publish() does: the next update sees the right staleness
        if compared:
            rows.append({"objective": label, "step": batch.step, "version": version, "live_loss": live.get(version), **metrics})
    with open(folder / "metrics.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    trainer.save_checkpoint(folder / f"step-{data.batches[-1][1].step:06d}", data.batches[-1][1].step)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="learner.replay", description="Train a run's stored batches again (replay --train).")
    parser.add_argument("--batches", required=True, help="the file engine/tools/replay.py wrote (OUT/batches.msgpack)")
    parser.add_argument("--out", required=True, help="where each objective's checkpoint and metrics go")
    parser.add_argument("--objective", action="append", default=[], help=f"run (the run's own) or one of {', '.join(OBJECTIVES)}; repeatable")
    parser.add_argument("--set", action="append", default=[], metavar="learner.KEY=VALUE", help="override a learner setting for the compared updates")
    args = parser.parse_args(argv)
    try:
        bad = [o for o in args.objective if o != "run" and o not in OBJECTIVES]
        if bad:
            raise InputError(f"--objective {bad[0]}: choose run or one of {', '.join(OBJECTIVES)}")
        not_learner = [s for s in args.set if not s.startswith("learner.")]
        if not_learner:
            raise InputError(f"--set {not_learner[0]}: replay --train changes only learner.* settings")
        data = read_batches(Path(args.batches))
        if not data.batches:
            raise InputError(f"{args.batches} holds no batch")
        config = read_config_file(RunPaths(data.run_dir).config)
        results = {label: replay_objective(data, config, label, args.set, Path(args.out)) for label in args.objective or ["run"]}
    except BaseException as exc:  # reported as every entry point reports (engine/protocol/errors.py)
        text, code = describe_failure(exc)
        print(text, file=sys.stderr)
        return code
    labels = list(results)
    print("step  version  live loss     " + "  ".join(f"{label:>14}" for label in labels))
    for i, row in enumerate(results[labels[0]]):
        live = "-" if row["live_loss"] is None else f"{row['live_loss']:+.6f}"
        print(f"{row['step']:>4}  {row['version']:>7}  {live:>10}  " + "  ".join(f"{results[label][i]['loss']:>+14.6f}" for label in labels))
    for label in labels:
        print(f"{label}: {Path(args.out) / label} (metrics.jsonl and a checkpoint)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
