"""The rollout worker process: designer, hint writer and agent actors over one inference backend and a sandbox pool.

    python -m actors.worker --run-dir RUN_DIR [--worker-id w1] [--connect ipc://...]

Started by `bin/spade-engine up`, or by hand (`bin/spade-engine worker --run-dir RUN_DIR`) to attach an extra
worker to a running engine. It reads the run's resolved `config.toml`, says hello, runs every task it is sent
(the engine never sends more than `inference.concurrency` at once), answers each with a result, loads new
policy versions between generation batches, and sends heartbeats. It holds no state that matters: if it dies,
the engine requeues its tasks.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import uuid
from pathlib import Path

import trio
import zmq

from engine.config import read_config_file
from engine.errors import RunFailed, leaf_exceptions
from engine.lifeline import cancel_on_sigterm, cancel_when_engine_gone, engine_pid
from engine.messages import (
    DesignTask,
    EngineToWorker,
    Heartbeat,
    HelloAgain,
    PlayTask,
    PolicyUpdate,
    Shutdown,
    TaskFailed,
    WorkerBye,
    WorkerHello,
)
from engine.paths import RunPaths
from engine.transport import ProtocolError, open_socket


class NoEngine(RunFailed):
    """Nobody answered the worker's hello."""


async def run_worker(run_dir: Path, worker_id: str, address: str | None) -> None:
    from actors.agent import play_episode
    from actors.designer import design_environment
    from actors.inference.base import build_backend
    from actors.inference.batcher import Batcher
    from actors.sandbox import open_sandbox_pool

    paths = RunPaths(run_dir)
    config = read_config_file(paths.config)
    import torch

    torch.set_num_threads(config.inference.threads or os.cpu_count() or 1)
    model_path = paths.read_model_path()
    backend = await trio.to_thread.run_sync(build_backend, config, model_path)
    sandbox = config.sandbox
    async with (
        open_sandbox_pool(
            workers=sandbox.workers,
            step_timeout_s=sandbox.step_timeout_s,
            episode_timeout_s=sandbox.episode_timeout_s,
            memory_mb=sandbox.memory_mb,
            cpu_seconds=sandbox.cpu_seconds,
            max_output_bytes=sandbox.max_output_bytes,
            episodes_per_worker=sandbox.episodes_per_worker,
            isolation=sandbox.isolation,
        ) as pool,
        open_socket(zmq.DEALER, address or _connect_address(config.worker.address) or paths.worker_address, bind=False, decode=EngineToWorker, identity=worker_id.encode()) as sock,
        trio.open_nursery() as nursery,
    ):
        batcher = Batcher(backend, max_batch=config.inference.max_batch, wait_s=config.inference.batch_wait_s)
        await nursery.start(batcher.run)
        busy = 0

        def hello() -> WorkerHello:
            return WorkerHello(
                worker_id=worker_id, pid=os.getpid(), slots=config.inference.concurrency, isolation=pool.isolation,
                backend=backend.name, policy_version=batcher.policy_version,
            )

        await sock.send(hello())

        async def heartbeat() -> None:
            beats = 0
            while True:
                await sock.send(Heartbeat(worker_id=worker_id, policy_version=batcher.policy_version, busy=busy))
                beats += 1
                if beats % 15 == 0:  # a line in the worker's log now and then: is the batcher batching?
                    st = batcher.statistics()
                    mean = st.requests / st.batches if st.batches else 0.0
                    print(f"[{worker_id}] v{st.policy_version} batches {st.batches} (mean size {mean:.1f}), tokens {st.tokens_generated}, generating {st.busy_seconds:.0f} s, {busy} tasks running", flush=True)
                await trio.sleep(config.worker.heartbeat_s)

        async def run_task(task) -> None:
            nonlocal busy
            busy += 1
            common = dict(batcher=batcher, pool=pool, tokenizer=backend.tokenizer, play_config=config.play, worker_id=worker_id)
            try:
                if isinstance(task, DesignTask):
                    result = await design_environment(task, **common)
                else:
                    result = await play_episode(task, **common)
            except Exception as exc:  # isolation boundary: one task fails, the worker goes on
                detail = "".join(traceback.format_exception_only(exc)).strip()
                print(f"[{worker_id}] task {task.task_id} failed: {detail}", file=sys.stderr, flush=True)
                traceback.print_exc()
                result = TaskFailed(task_id=task.task_id, worker_id=worker_id, reason=detail[:2000])
            finally:
                busy -= 1
            await sock.send(result)

        with trio.move_on_after(config.worker.connect_timeout_s) as waiting:
            try:
                first = await sock.receive()  # the engine answers every hello
            except ProtocolError:
                first = None  # somebody answered, if not well
        if waiting.cancelled_caught:
            raise NoEngine(f"no engine answered at {address or paths.worker_address} within {config.worker.connect_timeout_s:.0f} s (is `up` running for {run_dir}?)")
        nursery.start_soon(heartbeat)
        nursery.start_soon(cancel_on_sigterm, nursery.cancel_scope)
        if (pid := engine_pid()) is not None:
            nursery.start_soon(cancel_when_engine_gone, pid, nursery.cancel_scope, f"worker {worker_id}")
        pending = [first] if first is not None else []
        while True:
            try:
                message = pending.pop() if pending else await sock.receive()
            except ProtocolError as exc:
                print(f"[{worker_id}] ignoring a malformed message from the engine: {exc}", file=sys.stderr, flush=True)
                continue
            match message:
                case DesignTask() | PlayTask():
                    nursery.start_soon(run_task, message)
                case PolicyUpdate(version=version, path=path):
                    batcher.request_weights(version, path)
                case HelloAgain():  # an engine that does not know us (it restarted): join it
                    print(f"[{worker_id}] the engine asked for a new hello (it restarted?); joining again", flush=True)
                    await sock.send(hello())
                case Shutdown():
                    await sock.send(WorkerBye(worker_id=worker_id))
                    nursery.cancel_scope.cancel()
                    return


def _connect_address(bound: str) -> str:
    """The address to connect to for a bind address (a wildcard host becomes this host)."""
    return bound.replace("0.0.0.0", "127.0.0.1").replace("*", "127.0.0.1")


def main(argv: list[str] | None = None, prog: str = "actors.worker") -> int:
    """The worker's command line, for `python -m actors.worker` (started by `up`) and `bin/spade-engine worker`."""
    parser = argparse.ArgumentParser(prog=prog, description="A SPADE rollout worker: attaches to a running engine.")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--worker-id", default="")
    parser.add_argument("--connect", default=None, help="engine worker socket address (default: the run's ipc socket)")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    if not (run_dir / "config.toml").is_file():
        print(f"error: {run_dir} is not a run directory (no config.toml)", file=sys.stderr)
        return 2
    worker_id = args.worker_id or f"w-{uuid.uuid4().hex[:6]}"
    try:
        trio.run(run_worker, run_dir, worker_id, args.connect)
    except BaseException as exc:  # trio wraps what its tasks raised in exception groups
        leaves = leaf_exceptions(exc)
        if any(isinstance(e, KeyboardInterrupt) for e in leaves):
            return 130
        missing = [e for e in leaves if isinstance(e, NoEngine)]
        if missing and len(missing) == len(leaves):
            print(f"error: {missing[0]}", file=sys.stderr)
            return 1
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
