"""The learner process: receives training batches, updates the policy, publishes each new version.

    python -m learner.train --run-dir RUN_DIR                                        # one process
    python -m torch.distributed.run --standalone --nproc-per-node N -m learner.train --run-dir RUN_DIR

Started by `bin/spade-engine up` (the argv comes from `engine.peers.processes.learner_command`, torchrun when
`learner.world_size > 1`). It loads the run's model, resumes from `run_dir/checkpoints/latest` when that exists
(announcing the checkpoint's policy version in `LearnerHello`, so the engine resends what came after), says hello
on the engine's learner socket, and for each `TrainBatch` runs one update (learner/trainer.py), writes policy
version N+1 to `run_dir/policy/` and answers `PolicyPublished`. A batch marked `checkpoint` (the last one), and
every `learner.checkpoint_every`-th version, is followed by a full checkpoint in `run_dir/checkpoints/step-NNNNNN`
(learner/checkpoint.py) and `checkpoints/latest` pointing at it; the newest `learner.keep_checkpoints` stay.

Under torchrun only rank 0 talks to the engine; it broadcasts every message to the other ranks, which run the
same update on their share of the samples. While the engine is quiet, rank 0 broadcasts a keep-alive every
`KEEPALIVE_S`, so the collectives' timeout can stay short enough to catch a peer that hangs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

import trio
import zmq

from engine.protocol.config import Config
from engine.protocol.config_loading import read_config_file
from engine.protocol.devices import cpu_share, pin_process
from engine.protocol.errors import UsageError, describe_failure
from engine.protocol.lifeline import LEARNER_TOKEN_ENV, cancel_on_signal, cancel_when_engine_gone, engine_pid
from engine.protocol.messages import EngineToLearner, LearnerFailed, LearnerHello, PolicyPublished, Shutdown, TrainBatch
from engine.protocol.paths import RunPaths
from engine.protocol.transport import open_socket, train_batch_limit

KEEPALIVE_S = 60.0


def apply_batch(trainer, paths: RunPaths, config: Config, batch: TrainBatch) -> tuple[dict[str, float], Path]:
    """Update, publish and maybe checkpoint: what every rank does with a TrainBatch (rank 0 writes the files)."""
    from learner import guards  # a batch the learner cannot train on is refused (learner/guards.py)

    started = time.perf_counter()
    if config.learner.simulated_update_s > 0:  # benchmarks: a paced stand-in for the update; the loop stays real
        time.sleep(config.learner.simulated_update_s)
        metrics = {"simulated_update_s": config.learner.simulated_update_s, "samples": float(len(batch.samples))}
    elif problem := guards.batch_problem(batch.samples, guards.vocab_size(trainer.model)):
        metrics = guards.refused_metrics(batch.samples, problem, batch.step)  # no update; the version still advances
    else:
        metrics = trainer.update(batch.samples, sample_norm=batch.sample_norm)
    updated = time.perf_counter()
    path = trainer.publish(paths.policy, config.learner.keep_policies)
    every = config.learner.checkpoint_every
    if batch.checkpoint or (every > 0 and trainer.version % every == 0):
        folder = trainer.save_checkpoint(paths.checkpoints / f"step-{batch.step:06d}", batch.step)
        if trainer.dist.is_main:
            latest = paths.checkpoints / "latest"
            tmp = paths.checkpoints / ".latest"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(folder.name)
            tmp.replace(latest)  # atomic: `latest` always names a complete checkpoint
            prune_checkpoints(paths.checkpoints, keep=config.learner.keep_checkpoints, current=folder)
    # The step account's learner phases (engine/metrics/phases.py): the update, then publishing (and checkpointing);
    # under model.dtype bfloat16 the published weights' log-prob gap (learner/cast_check.py).
    metrics = {**metrics, **trainer.cast_check, "learner_update_s": updated - started, "learner_publish_s": time.perf_counter() - updated}
    return metrics, path


def prune_checkpoints(folder: Path, keep: int, current: Path) -> None:
    """Keep the newest `keep` checkpoint folders (named step-NNNNNN, so names sort by step), never `current`."""
    if keep <= 0:
        return
    checkpoints = sorted(p for p in folder.glob("step-*") if p.is_dir())
    for old in checkpoints[:-keep]:
        if old.resolve() != current.resolve():
            shutil.rmtree(old, ignore_errors=True)


def resume(trainer, paths: RunPaths, model_path: str) -> str:
    """Load `checkpoints/latest` if there is one; returns the folder the policy at `trainer.version` lives in."""
    latest = paths.checkpoints / "latest"
    if not latest.exists():
        return model_path
    trainer.load_checkpoint(latest)
    published = paths.policy_version_dir(trainer.version)
    return str(published if published.is_dir() else latest.resolve())


async def serve_engine(trainer, paths: RunPaths, config: Config, policy_path: str) -> None:
    """Rank 0: the engine conversation; every message is also broadcast to the other ranks."""
    dist = trainer.dist

    def handle(message):
        dist.broadcast(message)
        return apply_batch(trainer, paths, config, message) if isinstance(message, TrainBatch) else None

    limit = train_batch_limit(config)
    async with open_socket(zmq.DEALER, paths.learner_address, bind=False, decode=EngineToLearner, max_message_bytes=limit) as sock, trio.open_nursery() as nursery:
        nursery.start_soon(cancel_on_signal, nursery.cancel_scope)
        if (pid := engine_pid()) is not None:
            nursery.start_soon(cancel_when_engine_gone, pid, nursery.cancel_scope, "learner")
        token = os.environ.get(LEARNER_TOKEN_ENV, "")  # the engine's secret: only this hello is taken (engine/peers/auth.py)
        await sock.send(LearnerHello(pid=os.getpid(), policy_version=trainer.version, policy_path=policy_path, token=token))
        while True:
            message = None
            with trio.move_on_after(KEEPALIVE_S if dist.world_size > 1 else float("inf")):
                message = await sock.receive()
            match message:
                case None:
                    await trio.to_thread.run_sync(dist.broadcast, None)
                case TrainBatch(step=step):
                    try:
                        metrics, path = await trio.to_thread.run_sync(handle, message)
                    except Exception as exc:
                        traceback.print_exc()
                        await sock.send(LearnerFailed(reason=f"update for step {step} failed: {exc!r}"))
                        raise
                    await sock.send(PolicyPublished(version=trainer.version, path=str(path), step=step, metrics=metrics))
                case Shutdown():
                    await trio.to_thread.run_sync(handle, message)
                    nursery.cancel_scope.cancel()
                    return


def follow_rank0(trainer, paths: RunPaths, config: Config) -> None:
    """Ranks > 0: run what rank 0 broadcasts until it says Shutdown."""
    while True:
        match trainer.dist.broadcast(None):
            case None:
                continue  # rank 0's keep-alive
            case TrainBatch() as batch:
                apply_batch(trainer, paths, config, batch)
            case Shutdown():
                return


def run_learner(run_dir: Path) -> None:
    import torch

    from learner.distributed import init_distributed
    from learner.trainer import Trainer

    paths = RunPaths(run_dir)
    config = read_config_file(paths.config)
    dist = init_distributed(config.learner.device, gpus=config.learner.gpus, cpu_offload=config.learner.cpu_offload == "on")
    try:
        if dist.world_size != config.learner.world_size:
            raise UsageError(
                f"learner.world_size is {config.learner.world_size} but {dist.world_size} learner process(es) started: "
                "start the learner with engine.peers.processes.learner_command(python, run_dir, learner.world_size)"
            )
        if dist.device_type == "cpu":
            threads, pin = cpu_share(config, "learner")  # with a pin: the rollout workers run on the other cores
            if pin is not None and dist.world_size == 1:
                pin_process(pin)
            torch.set_num_threads(config.learner.threads or max(1, threads // dist.world_size))
        elif config.learner.threads:
            torch.set_num_threads(config.learner.threads)
        model_path = paths.read_model_path()
        trainer = Trainer(model_path, config.learner, seed=config.run.seed, dtype=config.model.dtype, distributed=dist)
        paths.policy.mkdir(parents=True, exist_ok=True)
        paths.checkpoints.mkdir(parents=True, exist_ok=True)
        policy_path = resume(trainer, paths, model_path)
        if dist.is_main:
            trio.run(serve_engine, trainer, paths, config, policy_path)
        else:
            follow_rank0(trainer, paths, config)
    finally:
        dist.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="learner.train", description="The SPADE learner process.")
    parser.add_argument("--run-dir", required=True)
    args = parser.parse_args(argv)
    try:
        run_learner(Path(args.run_dir))
    except BaseException as exc:  # reported as every entry point reports (engine/protocol/errors.py)
        text, code = describe_failure(exc)
        print(text, file=sys.stderr)
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
