"""The rollout worker process: designer, hint writer and agent actors over one inference backend and a sandbox pool.

    python -m actors.worker --run-dir RUN_DIR [--worker-id w1] [--connect ipc://...]
    bin/spade-engine worker --connect tcp://HOST:PORT --key worker.key [--run-dir OWN_DIR] [--fetch-policy]

Started by `bin/spade-engine up`, or by hand (`bin/spade-engine worker --run-dir RUN_DIR`) to attach an extra
worker to a running engine. From another machine (`--connect` to the engine's tcp socket, with the run's CURVE
key file, which `up` names) it needs no run directory: it takes the run's config and the current policy over
the wire (actors/remote.py), says hello only once that is loaded, and fetches each later version whose path it
cannot see. It reads the run's resolved `config.toml`, says hello, runs every task it is sent
(the engine never sends more than `inference.concurrency` at once), answers each with a result, loads new
policy versions between generation batches (a task starts only once the version it names, `min_policy_version`,
is loaded), and sends heartbeats. It holds no state that matters: if it dies,
the engine requeues its tasks.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
import traceback
import uuid
from pathlib import Path

import msgspec
import trio
import zmq

from actors.remote import PolicyFetcher, PolicyFollower, join_remote, wants_fetch
from engine.protocol.config_loading import read_config_file
from engine.protocol.devices import cpu_share, pin_process
from engine.protocol.placement import apply_worker_placement
from engine.protocol.errors import InputError, RunFailed, UsageError, describe_failure
from engine.protocol.keys import (
    IPC_SECRET_FILE,
    WORKER_FILE,
    WorkerKey,
    key_is_private,
    needs_keys,
    read_ipc_secret,
    read_worker_key,
)
from engine.protocol.lifeline import cancel_on_signal, cancel_when_engine_gone, engine_pid
from engine.protocol.messages import (
    DesignResult,
    DesignTask,
    EngineToWorker,
    FetchFailed,
    Heartbeat,
    HelloAgain,
    PlayResult,
    PlayTask,
    PolicyChunk,
    PolicyManifest,
    PolicyUpdate,
    Shutdown,
    Sleep,
    Slept,
    TaskFailed,
    ValidateTask,
    WakeUp,
    WorkerBye,
    WorkerHello,
)
from engine.protocol.paths import RunPaths, connect_address
from engine.protocol.transport import ProtocolError, open_socket


class NoEngine(RunFailed):
    """Nobody answered the worker's hello."""


class WorkerOptions(msgspec.Struct, kw_only=True):
    run_dir: Path | None  # the run directory (same machine), or the worker's own folder (remote)
    worker_id: str
    address: str | None
    key: Path | None = None
    fetch_policy: bool = False  # the config and every policy version over the wire, even where the paths exist here
    timeout_s: float = 60.0  # a remote worker: how long to wait for the engine's first answer

    @property
    def remote(self) -> bool:
        """No run directory of this run here: the config and the policy come from the engine."""
        return self.key is not None or self.fetch_policy or self.run_dir is None or not (self.run_dir / "config.toml").is_file()


DEFAULT_MAX_MESSAGE_MB = 16  # before a remote worker has the run's config (worker.max_message_mb)


def _local_dir(opts: WorkerOptions, key: WorkerKey | None) -> Path:
    if opts.run_dir is not None:
        return opts.run_dir
    tag = hashlib.sha1((key.server_public if key else opts.address or "").encode()).hexdigest()[:12]
    return Path.home() / ".cache" / "spade-engine" / f"worker-{tag}"


async def run_worker(opts: WorkerOptions) -> None:
    from actors.inference.factory import build_backend
    from actors.sandbox import SandboxSettings, open_sandbox_pool

    worker_id = opts.worker_id
    paths = RunPaths(opts.run_dir) if opts.run_dir is not None else None
    config = None if opts.remote else read_config_file(paths.config)
    key = read_worker_key(opts.key) if opts.key is not None else None
    if opts.remote:
        address = opts.address or (key.address if key else "")
        if not address:
            raise InputError("a worker without the run directory needs --connect tcp://HOST:PORT (or a --key file that names it)")
    else:
        address = opts.address or connect_address(config.worker.address) or paths.worker_address
        if key is None and needs_keys(address) and (paths.keys / WORKER_FILE).is_file():
            key = read_worker_key(paths.keys / WORKER_FILE)  # the engine's own worker on a tcp socket
    if needs_keys(address) and key is None:
        raise InputError(f"{address} is a tcp socket: the engine admits only holders of its key: give --key FILE (RUN_DIR/keys/{WORKER_FILE} of the engine's machine)")
    # On an ipc socket the hello carries the run's secret (engine/protocol/keys.py), read in the run directory (an
    # engine that never started there has made none: then no engine answers, and the worker says so).
    secret = ""
    if not needs_keys(address) and paths is not None and (paths.keys / IPC_SECRET_FILE).exists():
        secret = read_ipc_secret(paths.keys)
    max_mb = config.worker.max_message_mb if config else DEFAULT_MAX_MESSAGE_MB
    async with (
        open_socket(
            zmq.DEALER, address, bind=False, decode=EngineToWorker, identity=worker_id.encode(), max_message_bytes=max(max_mb, 2) << 20,
            client_key=key if needs_keys(address) else None,
        ) as sock,
        trio.open_nursery() as nursery,
    ):
        local_dir = _local_dir(opts, key)
        fetcher = PolicyFetcher(sock, local_dir / "fetched")
        start_version, adapter = 0, ""
        if opts.remote:
            joined = await join_remote(sock, fetcher, worker_id=worker_id, local_dir=local_dir, fetch_all=opts.fetch_policy, timeout_s=opts.timeout_s)
            if joined is None:
                raise NoEngine(f"no engine answered at {address} within {opts.timeout_s:.0f} s (is the address right, and --key the run's {WORKER_FILE}? a peer without it is refused)")
            config = read_config_file(joined.config_path)
            model_path, start_version, adapter = joined.model_path, joined.version, joined.adapter
        else:
            model_path = paths.read_model_path()
        import torch

        placed = apply_worker_placement(config)  # started by `up` on a GPU node: its GPUs and share (engine/protocol/placement.py)
        threads, pin = cpu_share(config, "inference")
        if pin is not None:  # only on CPU (cpu_share gives no pin with inference.gpus)
            pin_process(pin)  # the learner runs on the other cores (run.max_staleness > 0: engine/protocol/devices.py)
        torch.set_num_threads(threads)
        sleep_mode = placed is not None and placed.sleep_mode  # time-shared: asleep while the learner updates
        backend = await trio.to_thread.run_sync(lambda: build_backend(config, model_path, sleep_mode=sleep_mode))
        if adapter:
            await trio.to_thread.run_sync(backend.load_weights, adapter, start_version)
        elif start_version:
            backend.policy_version = start_version  # it started from that version's full model
        async with open_sandbox_pool(SandboxSettings.from_config(config.sandbox)) as pool:
            await _serve(sock, nursery, opts, config, backend, pool, fetcher, address, secret)


async def _serve(sock, nursery, opts: WorkerOptions, config, backend, pool, fetcher: PolicyFetcher, address: str, secret: str = "") -> None:
    """Hello, then every task until Shutdown: the worker once its backend and sandbox pool are up."""
    from actors.chat import with_chat_template_kwargs
    from actors.designer import design_environment
    from actors.inference.batcher import Batcher
    from actors.settings import for_play

    worker_id = opts.worker_id
    batcher = Batcher(backend, max_batch=config.inference.max_batch, wait_s=config.inference.batch_wait_s)
    await nursery.start(batcher.run)
    follower = PolicyFollower(fetcher, batcher.request_weights, worker_id, loaded=batcher.policy_version)
    nursery.start_soon(follower.run)
    # Time-shared GPUs: the engine's Sleep / WakeUp, carried out one at a time in the order they came.
    turns_in, turns = trio.open_memory_channel(16)

    async def take_turns() -> None:
        async for message in turns:
            if isinstance(message, Sleep):
                seconds = await batcher.sleep()
                print(f"[{worker_id}] asleep for the learner's update (v{batcher.policy_version} loaded; {seconds:.1f} s)", flush=True)
                await sock.send(Slept(worker_id=worker_id, seconds=seconds))
            else:
                await batcher.wake()
                print(f"[{worker_id}] awake with v{batcher.policy_version}", flush=True)

    nursery.start_soon(take_turns)
    tokenizer = with_chat_template_kwargs(backend.tokenizer, config.model.chat_template_kwargs)  # every render gets them
    busy = 0
    received = 0  # tasks taken off the socket since the last hello (each heartbeat says it: engine/peers/dispatch.py)

    def hello() -> WorkerHello:
        return WorkerHello(
            worker_id=worker_id, pid=os.getpid(), slots=config.inference.concurrency, isolation=pool.isolation,
            backend=backend.name, policy_version=batcher.policy_version, secret=secret,
        )

    await sock.send(hello())

    async def heartbeat() -> None:
        beats = 0
        while True:
            st = batcher.statistics()
            await sock.send(Heartbeat(worker_id=worker_id, policy_version=batcher.policy_version, busy=busy,
                                      generating_s=st.busy_seconds, sequence_s=st.sequence_seconds, tasks_received=received))
            beats += 1
            if beats % 15 == 0:  # a line in the worker's log now and then: is the batcher batching?
                mean = st.requests / st.batches if st.batches else 0.0
                print(f"[{worker_id}] v{st.policy_version} batches {st.batches} (mean size {mean:.1f}), tokens {st.tokens_generated}, generating {st.busy_seconds:.0f} s, {busy} tasks running", flush=True)
            await trio.sleep(config.worker.heartbeat_s)

    async def run_task(task) -> None:
        nonlocal busy
        waiting = time.perf_counter()
        await follower.ready()  # a policy version being fetched over the wire: play it, not the one before
        # The version the engine admitted the task on, loaded before its first token (the PolicyUpdate that names it
        # comes first on this socket, so the wait is for the load; a bounded one in case the update was lost).
        if not await batcher.hold(task.min_policy_version, wait_s=config.worker.connect_timeout_s):
            print(f"[{worker_id}] task {task.task_id} needs policy v{task.min_policy_version}, which did not come within "
                  f"worker.connect_timeout_s = {config.worker.connect_timeout_s:.0f} s; it runs on v{batcher.policy_version}", file=sys.stderr, flush=True)
        policy_wait_s = time.perf_counter() - waiting
        busy += 1
        common = dict(batcher=batcher, pool=pool, tokenizer=tokenizer, play_config=config.play, worker_id=worker_id)
        try:
            if isinstance(task, DesignTask):
                result = await design_environment(task, **common)
            else:  # a game, a tool-use episode or a Reasoning-Gym problem (RLVE, rg-hard eval: no sandbox)
                result = await for_play(task).play(task, **common)
        except Exception as exc:  # isolation boundary: one task fails, the worker goes on
            detail = "".join(traceback.format_exception_only(exc)).strip()
            print(f"[{worker_id}] task {task.task_id} failed: {detail}", file=sys.stderr, flush=True)
            traceback.print_exc()
            result = TaskFailed(task_id=task.task_id, worker_id=worker_id, reason=detail[:2000])
        finally:
            busy -= 1
        if isinstance(result, (DesignResult, PlayResult)):  # the step account's worker reload (engine/metrics/phases.py)
            result = msgspec.structs.replace(result, policy_wait_s=policy_wait_s)
        await sock.send(result)

    with trio.move_on_after(config.worker.connect_timeout_s) as waiting:
        try:
            first = await sock.receive()  # the engine answers every hello
        except ProtocolError:
            first = None  # somebody answered, if not well
    if waiting.cancelled_caught:
        raise NoEngine(f"no engine answered at {address} within {config.worker.connect_timeout_s:.0f} s (is `up` running for {opts.run_dir}?)")
    nursery.start_soon(heartbeat)
    nursery.start_soon(cancel_on_signal, nursery.cancel_scope)
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
                received += 1
                nursery.start_soon(run_task, message)
            case ValidateTask():  # a design claimed valid, validated again before it is played
                from actors.revalidate import answer_validation

                received += 1
                nursery.start_soon(answer_validation, sock, message, pool, config, worker_id)
            case PolicyUpdate(version=version, path=path):
                if wants_fetch(path, opts.fetch_policy):
                    follower.want(version)  # not on this machine: over the wire (actors/remote.py)
                else:
                    batcher.request_weights(version, path)
            case PolicyManifest() | PolicyChunk() | FetchFailed():
                fetcher.deliver(message)
            case Sleep() | WakeUp():  # after this socket's PolicyUpdate, so a wake loads that version first
                await turns_in.send(message)
            case HelloAgain():  # an engine that does not know us (it restarted): join it
                print(f"[{worker_id}] the engine asked for a new hello (it restarted?); joining again", flush=True)
                received = 0  # the engine counts its sends from the hello
                await sock.send(hello())
            case Shutdown():
                await sock.send(WorkerBye(worker_id=worker_id))
                nursery.cancel_scope.cancel()
                return


def main(argv: list[str] | None = None, prog: str = "actors.worker") -> int:
    """The worker's command line, for `python -m actors.worker` (started by `up`) and `bin/spade-engine worker`."""
    parser = argparse.ArgumentParser(prog=prog, description="A SPADE rollout worker: attaches to a running engine, on this machine or another.")
    parser.add_argument("--run-dir", default=None, help="the run directory (same machine); with --connect/--key: this worker's own folder")
    parser.add_argument("--worker-id", default="")
    parser.add_argument("--connect", default=None, help="engine worker socket address (default: the run's socket, or the --key file's)")
    parser.add_argument("--key", default=None, help=f"the run's {WORKER_FILE} (RUN_DIR/keys/ on the engine's machine): needed for a tcp socket")
    parser.add_argument("--fetch-policy", action="store_true", help="take the config and every policy version over the wire even where their paths exist here")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the engine's first answer (remote)")
    args = parser.parse_args(argv)
    try:
        trio.run(run_worker, _options(args))
    except BaseException as exc:  # reported as every entry point reports (engine/protocol/errors.py)
        text, code = describe_failure(exc)
        print(text, file=sys.stderr)
        return code
    return 0


def _options(args) -> WorkerOptions:
    run_dir = Path(args.run_dir).resolve() if args.run_dir else None
    remote_flags = args.connect or args.key or args.fetch_policy
    if run_dir is None and not remote_flags:
        raise UsageError("give --run-dir RUN_DIR (same machine) or --connect tcp://HOST:PORT --key FILE (another machine)")
    if run_dir is not None and not remote_flags and not (run_dir / "config.toml").is_file():
        raise UsageError(f"{run_dir} is not a run directory (no config.toml)")
    worker_id = args.worker_id or f"w-{uuid.uuid4().hex[:6]}"
    if len(worker_id) > 128:
        raise UsageError("--worker-id is longer than 128 characters")
    key = Path(args.key).resolve() if args.key else None
    if key is not None and key.is_file() and not key_is_private(key):
        print(f"warning: {key} can be read by other users: chmod 600 it", file=sys.stderr)
    return WorkerOptions(run_dir=run_dir, worker_id=worker_id, address=args.connect, key=key, fetch_policy=args.fetch_policy, timeout_s=args.timeout)


if __name__ == "__main__":
    sys.exit(main())
