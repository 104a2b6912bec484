"""bin/bench bus: the engine's receive path against a raw pyzmq + lmdb pipeline, on the same stream of trajectories.

N simulated rollout workers (separate processes, plain pyzmq DEALERs) answer every PlayTask they get with a
PlayResult whose agent sample is 4-32 KB (300-2,500 tokens; the sample of a task is fixed by its id, so both
pipelines move the same bytes). Two receivers take the same volume, `--steps` steps of `--tasks` tasks each:
- engine: the engine's own code: the peer services of a run (`Hub.serve`, engine/peers/hub.py: the Bus's ROUTER with
  its decode, size limits and counters, the message budgets, the dispatcher's credit and leases, the result checks),
  each step's tasks through `Hub.run_tasks` as the loop sends them, and `store_plays` (one Store batch, i.e. one LMDB
  transaction, per step), under Trio;
- raw: a blocking pyzmq ROUTER that sends the tasks by the same credit and puts each result's bytes into LMDB as
  they are, one transaction per step.
Each round runs both (in turn, fresh stores, the same workers' code); `--rounds` rounds, the best of each mode
counts (the machine may be shared); the receiver's CPU time per result is printed too (what load does not blur).
The engine's workers say hello with the run's ipc secret, as `spade-engine worker` does (engine/peers/auth.py
refuses a hello without it). Each wait is bounded (`WAIT_S`): workers that never say hello, or a step from which no
result comes back for that long (workers gone, shed or refused), end the bench with one error line, not a hang. Ends with one JSON line
{"bench": "bus", "ratio": engine MB/s / raw MB/s, "target": 0.8, ...}.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import lmdb
import msgspec
import zmq

from engine.protocol.messages import (
    EngineToWorker,
    PlayResult,
    PlayTask,
    Sample,
    Shutdown,
    TurnRecord,
    WorkerHello,
    pack_floats,
    pack_ints,
    pack_mask,
)

SLOTS = 8
POOL = 32  # distinct samples; a task's is chosen by its id
WAIT_S = 60.0  # the longest wait for the workers' hellos, or for any one result


class BenchFailed(SystemExit):
    pass


def sample_pool(seed: int = 7) -> list[Sample]:
    rng = random.Random(seed)
    pool = []
    for i in range(POOL):
        n = rng.randrange(4096, 32768) // 13  # 13 bytes a token: id, mask, log-prob, version
        mask = [0] * (n // 5) + [1] * (n - n // 5)
        pool.append(Sample(
            sample_id=f"p{i}", role="agent", env_id="e0", skill="s", arm="no_hint", step=0,
            tokens=pack_ints([rng.randrange(50000) for _ in range(n)]), loss_mask=pack_mask(mask),
            logprobs=pack_floats([-rng.random() if m else 0.0 for m in mask]), versions=pack_ints([0 if m else -1 for m in mask]),
            reward=1.0,
        ))
    return pool


def worker_main(address: str, worker_id: str, secret: str = "") -> None:
    """A simulated rollout worker: hello (with the run's ipc secret, for the engine), then a PlayResult for every
    PlayTask, until Shutdown."""
    pool = sample_pool()
    turn = TurnRecord(action="1", parse_rule="boxed_last", reward=1.0, terminated=True, truncated=False, policy_version=0, observation_chars=80)
    encoder, decoder = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(EngineToWorker)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, worker_id.encode())
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(address)
    sock.send(encoder.encode(WorkerHello(worker_id=worker_id, pid=os.getpid(), slots=SLOTS, isolation="none", backend="bench",
                                         policy_version=0, secret=secret)))
    while True:
        message = decoder.decode(sock.recv())
        if isinstance(message, Shutdown):
            break
        if not isinstance(message, PlayTask):
            continue  # the engine's PolicyUpdate answering the hello
        sample = msgspec.structs.replace(pool[zlib.crc32(message.task_id.encode()) % POOL], sample_id=message.task_id, step=message.step)
        sock.send(encoder.encode(PlayResult(
            task_id=message.task_id, worker_id=worker_id, env_id=message.env_id, arm=message.arm, seed=message.seed, status="completed",
            failure="", episode_return=1.0, turns=[turn], agent=sample, tokens_generated=len(sample.tokens) // 4, seconds=0.01,
        )))
    sock.close()


def tasks_of(step: int, n: int) -> list[PlayTask]:
    return [PlayTask(task_id=f"s{step:04d}-bench-{i:05d}", env_id="e0", skill="s", code="", hint="", arm="no_hint", seed=i, step=step) for i in range(n)]


def start_workers(address: str, n: int, tag: str, secret: str = "") -> list[subprocess.Popen]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return [subprocess.Popen([sys.executable, __file__, "--worker", address, f"{tag}{i}", secret], env=env) for i in range(n)]


def stop_workers(workers: list[subprocess.Popen]) -> None:
    """End the workers this bench started (by their pids), however it ends: a few seconds to leave after Shutdown."""
    for w in workers:
        try:
            w.wait(timeout=5)
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()


def run_engine(root: Path, args) -> dict:
    import trio

    from engine.metrics.live import LiveView
    from engine.plays import store_plays
    from engine.protocol.config_loading import dump_config, load_config
    from engine.protocol.keys import ensure_ipc_secret
    from engine.protocol.paths import RunPaths
    from engine.run import Engine

    paths = RunPaths(root)
    paths.root.mkdir(parents=True)
    config = load_config(overrides=[f"run.steps={args.steps}"])
    paths.config.write_text(dump_config(config))
    paths.update_meta(model_path=str(root))
    engine = Engine(config, paths, [], view=LiveView(args.steps, stream=io.StringIO(), enabled=False))
    hub = engine.hub
    if args.without_checks:  # a diagnostic, never how the engine runs: what the rest of the receive path costs
        hub.result_gate.values_pass = lambda results, newest_version: True
        hub.result_gate.screen = lambda ident, result, dispatcher, newest_version, values_checked=False: (result, False)
    out: dict = {}

    async def main() -> None:
        async with hub.bus.open() as (worker_sock, learner_sock), trio.open_nursery() as nursery:
            await hub.serve(nursery, worker_sock, learner_sock)  # the dispatcher, receivers and budgets of a run
            workers = start_workers(hub.bus.worker_address, args.workers, "e", ensure_ipc_secret(paths.keys))
            try:
                with trio.move_on_after(WAIT_S) as hellos:
                    while len(hub.dispatcher.workers) < args.workers:
                        await trio.sleep(0.01)
                if hellos.cancelled_caught:
                    raise BenchFailed(f"bench bus: {len(hub.dispatcher.workers)} of {args.workers} simulated workers said hello "
                                      f"to the engine within {WAIT_S:g} s (refused? see the bus counters: {hub.bus.counters()['workers']})")
                started, cpu, store_s = time.perf_counter(), time.process_time(), 0.0
                for step in range(args.steps):
                    async with trio.open_nursery() as step_nursery:
                        step_nursery.start_soon(_watch_progress, hub, step)
                        results = await hub.run_tasks("bench", tasks_of(step, args.tasks))
                        step_nursery.cancel_scope.cancel()
                    stored = time.perf_counter()
                    plays = store_plays(engine.store, step, results)
                    store_s += time.perf_counter() - stored
                    assert len(plays) == args.tasks, [r for r in results if not isinstance(r, PlayResult)][:1]
                out["seconds"], out["cpu_s"], out["store_s"] = time.perf_counter() - started, time.process_time() - cpu, store_s
                await hub.dispatcher.broadcast(Shutdown())
                with trio.move_on_after(WAIT_S):
                    for w in workers:
                        await trio.to_thread.run_sync(w.wait, abandon_on_cancel=True)
            finally:
                stop_workers(workers)
            out["counters"] = hub.bus.counters()["workers"]
            nursery.cancel_scope.cancel()

    trio.run(main)
    stored = sum(1 for t in engine.store.trajectories())
    engine.store.close()
    out["stored"] = stored
    return out


async def _watch_progress(hub, step: int) -> None:
    """Ends the bench with one error line when no result of `step` has come back for WAIT_S (workers gone, shed or
    refused): counted by the dispatcher's outstanding tasks."""
    import trio

    outstanding = hub.dispatcher.outstanding
    last, since = outstanding(), time.monotonic()
    while True:
        await trio.sleep(0.5)
        if (now := outstanding()) != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > WAIT_S:
            raise BenchFailed(f"bench bus: no result of step {step} came back for {WAIT_S:g} s ({now} outstanding; "
                              f"the bus counters: {hub.bus.counters()['workers']})")


def run_raw(root: Path, args) -> dict:
    root.mkdir(parents=True)
    env = lmdb.open(str(root / "store"), map_size=1 << 40, max_dbs=8, subdir=True, lock=True)
    db = env.open_db(b"trajectories")
    address = f"ipc://{root}/raw.sock"
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.SNDHWM, 1000)
    router.setsockopt(zmq.RCVHWM, 100)
    router.setsockopt(zmq.RCVTIMEO, int(WAIT_S * 1000))  # a worker that never answers ends the bench, not hangs it
    router.bind(address)
    encoder = msgspec.msgpack.Encoder()
    workers = start_workers(address, args.workers, "r")
    try:
        return _raw_receive(router, env, db, encoder, idents_of(router, args.workers), args)
    except zmq.Again:
        raise BenchFailed(f"bench bus: the raw pipeline's workers stopped answering for {WAIT_S:g} s") from None
    finally:
        stop_workers(workers)
        router.close(linger=100)
        env.close()


def idents_of(router, n: int) -> list[bytes]:
    idents = []
    while len(idents) < n:
        idents.append(router.recv_multipart()[0])  # the hellos
    return idents


def _raw_receive(router, env, db, encoder, idents: list[bytes], args) -> dict:
    started, cpu, store_s = time.perf_counter(), time.process_time(), 0.0
    credit = {ident: SLOTS for ident in idents}
    for step in range(args.steps):
        pending = [encoder.encode(t) for t in tasks_of(step, args.tasks)]
        received = 0
        txn = env.begin(write=True, db=db)
        for ident in idents:
            while credit[ident] and pending:
                router.send_multipart([ident, pending.pop()])
                credit[ident] -= 1
        while received < args.tasks:
            ident, frame = router.recv_multipart()
            txn.put(f"{step:06d}/{received:05d}-{ident.decode()}".encode(), frame)
            received += 1
            credit[ident] += 1
            if pending:
                router.send_multipart([ident, pending.pop()])
                credit[ident] -= 1
        committed = time.perf_counter()
        txn.commit()
        store_s += time.perf_counter() - committed
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    for ident in idents:
        router.send_multipart([ident, encoder.encode(Shutdown())])
    with env.begin(db=db) as txn:
        stored = txn.stat(db)["entries"]
    return {"seconds": seconds, "cpu_s": cpu, "store_s": store_s, "stored": stored}


def _rounds(args, megabytes: float, total: int) -> tuple[dict, list[float]]:
    """Each round runs both pipelines on the same volume; the best of each mode, and each round's ratio."""
    best = {"engine": None, "raw": None}
    ratios = []
    with tempfile.TemporaryDirectory(prefix="bench-bus-") as tmp:
        for r in range(args.rounds):
            figures = {}
            for mode, fn in (("raw", run_raw), ("engine", run_engine)):
                result = fn(Path(tmp) / f"{mode}-{r}", args)
                assert result["stored"] == total, (mode, result)
                figures[mode] = result
                rate = megabytes / result["seconds"]
                print(f"round {r + 1} {mode:6s}: {total} results in {result['seconds']:.2f} s = {total / result['seconds']:.0f} results/s, "
                      f"{rate:.1f} MB/s; receiver CPU {result['cpu_s'] / total * 1e6:.0f} us/result", flush=True)
                if best[mode] is None or result["seconds"] < best[mode]["seconds"]:
                    best[mode] = result
            ratios.append(figures["raw"]["seconds"] / figures["engine"]["seconds"])
    return best, ratios


def main() -> int:
    if sys.argv[1:2] == ["--worker"]:
        worker_main(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "")
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=128, help="PlayResults per step (one Store batch each)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--without-checks", action="store_true",
                        help="diagnostic: the engine's result checks bypassed, to see what the rest of its receive path costs "
                             "(the JSON line says so in `settings`); never how a run goes")
    args = parser.parse_args()
    pool = sample_pool()
    mean_kb = sum(len(s.tokens) + len(s.loss_mask) + len(s.logprobs) + len(s.versions) for s in pool) / len(pool) / 1024
    total = args.steps * args.tasks
    # the volume, from the pool (the same for both pipelines: a task's sample is fixed by its id)
    sizes = [len(msgspec.msgpack.encode(pool[zlib.crc32(t.task_id.encode()) % POOL])) for s in range(args.steps) for t in tasks_of(s, args.tasks)]
    megabytes = sum(sizes) / 1e6
    print(f"workload: {args.workers} workers x {SLOTS} slots, {args.steps} steps x {args.tasks} PlayResults = {total} results, "
          f"samples 4-32 KB (mean {mean_kb:.1f} KB), {megabytes:.1f} MB of samples", flush=True)
    try:
        best, ratios = _rounds(args, megabytes, total)
    except BaseException as exc:  # one line for a bench that cannot finish (inside Trio it comes in a group)
        from engine.protocol.errors import leaf_exceptions

        failed = next((e for e in leaf_exceptions(exc) if isinstance(e, BenchFailed)), None)
        if failed is None:
            raise
        print(failed.code, file=sys.stderr)
        return 1
    engine_rate, raw_rate = megabytes / best["engine"]["seconds"], megabytes / best["raw"]["seconds"]
    counters = best["engine"]["counters"]
    print(json.dumps({
        "bench": "bus", "ratio": round(engine_rate / raw_rate, 3), "target": 0.8,
        "engine_mb_per_s": round(engine_rate, 1), "raw_mb_per_s": round(raw_rate, 1),
        "engine_results_per_s": round(total / best["engine"]["seconds"]), "raw_results_per_s": round(total / best["raw"]["seconds"]),
        "round_ratios": [round(x, 3) for x in ratios],
        "engine_cpu_us_per_result": round(best["engine"]["cpu_s"] / total * 1e6), "raw_cpu_us_per_result": round(best["raw"]["cpu_s"] / total * 1e6),
        # of each best round's wall time a result, what the step's store took: store_plays (records, puts, commit) / raw's commit
        "engine_store_us_per_result": round(best["engine"]["store_s"] / total * 1e6), "raw_commit_us_per_result": round(best["raw"]["store_s"] / total * 1e6),
        "workers": args.workers, "results": total, "mean_sample_kb": round(mean_kb, 1), "settings": ["without_checks"] if args.without_checks else [],
        "engine_bad_frames": counters.get("bad_frames", 0), "engine_rejected_results": counters.get("rejected_results", 0),
        "engine_dropped_sends": counters.get("dropped_sends", 0),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
