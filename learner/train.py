"""The learner process: receives training batches, updates the policy, publishes each new version.

    python -m learner.train --run-dir RUN_DIR

Started by `bin/spade-engine up`. It loads the run's model, says hello on the engine's learner socket, and for
each `TrainBatch` runs one update (learner/trainer.py), writes policy version N+1 to `run_dir/policy/`, and
answers `PolicyPublished`. A batch marked `checkpoint` (the last one) is followed by a full checkpoint in
`run_dir/checkpoints/step-NNNNNN` (Hugging Face format plus optimizer state).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback
from pathlib import Path

import trio
import zmq

from engine.config import read_config_file
from engine.messages import EngineToLearner, LearnerFailed, LearnerHello, PolicyPublished, Shutdown, TrainBatch
from engine.paths import RunPaths
from engine.transport import open_socket


async def run_learner(run_dir: Path) -> None:
    import torch

    from learner.trainer import Trainer

    paths = RunPaths(run_dir)
    config = read_config_file(paths.config)
    torch.set_num_threads(config.learner.threads or os.cpu_count() or 1)
    model_path = paths.read_model_path()
    trainer = await trio.to_thread.run_sync(
        lambda: Trainer(model_path, config.learner, seed=config.run.seed, dtype=config.model.dtype)
    )
    paths.policy.mkdir(parents=True, exist_ok=True)
    paths.checkpoints.mkdir(parents=True, exist_ok=True)
    async with open_socket(zmq.DEALER, paths.learner_address, bind=False, decode=EngineToLearner) as sock, trio.open_nursery() as nursery:
        nursery.start_soon(_cancel_on_sigterm, nursery.cancel_scope)
        await sock.send(LearnerHello(pid=os.getpid(), policy_version=trainer.version, policy_path=model_path))
        while True:
            message = await sock.receive()
            match message:
                case TrainBatch(step=step, samples=samples, checkpoint=checkpoint):
                    try:
                        metrics = await trio.to_thread.run_sync(trainer.update, samples)
                        path = await trio.to_thread.run_sync(trainer.publish, paths.policy, config.learner.keep_policies)
                        if checkpoint:
                            folder = paths.checkpoints / f"step-{step:06d}"
                            await trio.to_thread.run_sync(trainer.save_checkpoint, folder, step)
                            (paths.checkpoints / "latest").unlink(missing_ok=True)
                            (paths.checkpoints / "latest").symlink_to(folder.name)
                    except Exception as exc:
                        traceback.print_exc()
                        await sock.send(LearnerFailed(reason=f"update for step {step} failed: {exc!r}"))
                        raise
                    await sock.send(PolicyPublished(version=trainer.version, path=str(path), step=step, metrics=metrics))
                case Shutdown():
                    nursery.cancel_scope.cancel()
                    return


async def _cancel_on_sigterm(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async for _ in signals:
            scope.cancel()
            return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="learner.train", description="The SPADE learner process.")
    parser.add_argument("--run-dir", required=True)
    args = parser.parse_args(argv)
    try:
        trio.run(run_learner, Path(args.run_dir))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
