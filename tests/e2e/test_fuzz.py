"""The engine under fire: >= 10,000 random, truncated, oversized and wrongly-typed frames at each of its sockets,
forged messages, a peer that disconnects after one message and one that never reads (both floods are shed: past
worker.message_burst, engine/peers/flood.py). Then a real worker joins,
the engine finishes its steps, its peak memory (VmHWM) stayed bounded, and its counters (run.json `bus`) match
what was sent. Bounded in time and count; ipc only (the sockets' default).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import zmq
from zmq.utils.monitor import parse_monitor_message

from engine.protocol.messages import (
    Heartbeat,
    LearnerFailed,
    LearnerHello,
    LearnerToEngine,
    PlayResult,
    PolicyPublished,
    PolicyUpdate,
    Sample,
    TaskFailed,
    TrainBatch,
    TurnRecord,
    WorkerHello,
    WorkerToEngine,
    pack_floats,
    pack_ints,
    pack_mask,
)
from engine.protocol.paths import RunPaths
from storage.store import Store
from tests.e2e.helpers import up_command, up_script

JUNK = 10_000  # undecodable frames per socket
OVERSIZED = 8  # connections that each send one frame over worker.max_message_mb
NEVER_READS = 20_000  # heartbeats from a peer that never reads the replies
HIT_AND_RUN = 20  # peers that send one message and disconnect
FORGED_RESULTS = 20
FORGED_LEARNER = 30


def _sample(rng: random.Random, tokens: int) -> Sample:
    mask = [0] * (tokens // 4) + [1] * (tokens - tokens // 4)
    return Sample(
        sample_id=f"fz-{rng.random()}", role="agent", env_id="e", skill="s", arm="no_hint", step=0,
        tokens=pack_ints([rng.randrange(1000) for _ in range(tokens)]), loss_mask=pack_mask(mask),
        logprobs=pack_floats([-1.0] * tokens), versions=pack_ints([0] * tokens), reward=0.0,
    )


def _play(rng: random.Random, task_id: str) -> PlayResult:
    turn = TurnRecord(action="1", parse_rule="boxed_last", reward=1.0, terminated=True, truncated=False, policy_version=0, observation_chars=9)
    return PlayResult(
        task_id=task_id, worker_id="fz", env_id="e", arm="no_hint", seed=1, status="completed", failure="", episode_return=1.0,
        turns=[turn], agent=_sample(rng, rng.randrange(300, 2500)), tokens_generated=10, seconds=0.1,
    )


def _junk_frames(rng: random.Random, union, examples: list, count: int) -> list[list[bytes]]:
    """`count` messages none of which decodes as `union`: random bytes, truncated and wrongly-typed encodings,
    messages of the other direction, non-map values, and the wrong number of frames."""
    decoder, encode = msgspec.msgpack.Decoder(union), msgspec.msgpack.encode
    wrong_values = [1, -5, 2.5, "x" * 70, [1, 2], {"a": 1}, b"\x00\x01", None, True, "w" * 5000]
    out: list[list[bytes]] = []
    while len(out) < count:
        kind = rng.randrange(6)
        if kind == 0:
            frame = rng.randbytes(rng.randrange(0, 3000))
        elif kind == 1:
            full = encode(rng.choice(examples))
            frame = full[: rng.randrange(0, len(full))]
        elif kind == 2:
            raw = msgspec.to_builtins(rng.choice(examples))
            field = rng.choice([k for k in raw if k != "type"])
            raw[field] = rng.choice([v for v in wrong_values if type(v) is not type(raw[field])])
            frame = encode(raw)
        elif kind == 3:
            frame = encode(rng.choice([PolicyUpdate(version=1, path="/x"), TrainBatch(step=0, samples=[], checkpoint=False), Heartbeat(worker_id="w", policy_version=0, busy=0), LearnerFailed(reason="x")]))
        elif kind == 4:
            frame = encode(rng.choice([0, "hello", [1, {"type": "heartbeat"}], {"type": "no_such_type"}, {"no": "type"}]))
        else:
            out.append([rng.randbytes(rng.randrange(1, 50)) for _ in range(rng.randrange(2, 4))])  # 3 or 4 at the router
            continue
        try:
            decoder.decode(frame)
        except (msgspec.ValidationError, msgspec.DecodeError):
            out.append([frame])
    return out


def _dealer(address: str, identity: bytes, **options) -> zmq.Socket:
    return _monitored_dealer(address, identity, 0, **options)[0]


def _monitored_dealer(address: str, identity: bytes, monitor_events: int, **options) -> tuple[zmq.Socket, zmq.Socket | None]:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, identity)
    sock.setsockopt(zmq.LINGER, 5000)
    for name, value in options.items():
        sock.setsockopt(getattr(zmq, name), value)
    # the monitor is attached before connecting: a handshake that completes at once is then still seen
    monitor = sock.get_monitor_socket(monitor_events) if monitor_events else None
    sock.connect(address)
    return sock, monitor


def _wait_for(monitor: zmq.Socket, event: int, events: list, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while event not in events and time.monotonic() < deadline:
        if monitor.poll(200):
            events.append(parse_monitor_message(monitor.recv_multipart())["event"])


def _oversized(address: str, n: int, size: int) -> None:
    """n connections, each sending one frame over the limit; each waits until the engine drops it."""
    for i in range(n):
        sock, monitor = _monitored_dealer(address, f"big-{i}".encode(), zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED, LINGER=0)
        events = []
        _wait_for(monitor, zmq.EVENT_HANDSHAKE_SUCCEEDED, events, 20)
        assert zmq.EVENT_HANDSHAKE_SUCCEEDED in events, "the engine never completed a handshake with a new peer"
        sock.send(b"\x00" * size)
        _wait_for(monitor, zmq.EVENT_DISCONNECTED, events, 20)
        assert zmq.EVENT_DISCONNECTED in events, "the engine kept a connection that sent an oversized frame"
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close()


def _vm_hwm_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _bus(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "run.json").read_text()).get("bus", {})
    except (OSError, ValueError):
        return {}


def test_no_peer_can_crash_hang_or_bloat_the_engine(tiny_model_path, tmp_path, processes):  # noqa: F811
    started = time.monotonic()
    run_dir = tmp_path / "run"
    out_file = tmp_path / "engine.out"
    extra = ["--set", "worker.count=0", "--set", "worker.max_message_mb=1"]
    with open(out_file, "w") as out:
        engine = processes.popen(up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=2, extra=extra), stdout=out, stderr=subprocess.STDOUT)
    paths = RunPaths(run_dir)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and _bus(run_dir).get("learner", {}).get("frames", 0) < 1:  # the learner said hello
        assert engine.poll() is None, out_file.read_text()
        time.sleep(0.3)
    assert _bus(run_dir).get("learner", {}).get("frames", 0) >= 1, "the learner never joined"
    before_kb = _vm_hwm_kb(engine.pid)
    rng = random.Random(12)
    workers, learner = paths.worker_address, paths.learner_address

    # --- the worker socket
    junk_w = _junk_frames(rng, WorkerToEngine, [_play(rng, "t"), WorkerHello(worker_id="w", pid=1, slots=2, isolation="", backend="", policy_version=0), TaskFailed(task_id="t", worker_id="w", reason="r"), Heartbeat(worker_id="w", policy_version=0, busy=0)], JUNK)
    fuzz = _dealer(workers, b"fuzz-w")
    for frames in junk_w:
        fuzz.send_multipart(frames)
    forger = _dealer(workers, b"forger")
    for i in range(FORGED_RESULTS):  # task ids it predicted, answered without a lease
        forger.send(msgspec.msgpack.encode(_play(rng, f"s0000-s0000-e00-a0-no_hint-{i:02d}") if i % 2 else TaskFailed(task_id=f"s0000-e0{i % 2}-a0", worker_id="w0", reason="forged")))
    for i in range(HIT_AND_RUN):
        peer = _dealer(workers, f"hit-and-run-{i}".encode())
        peer.send(msgspec.msgpack.encode(Heartbeat(worker_id="w", policy_version=0, busy=0)))  # answered HelloAgain: nobody there
        peer.close()
    deaf = _dealer(workers, b"never-reads", RCVHWM=1)
    beat = msgspec.msgpack.encode(Heartbeat(worker_id="deaf", policy_version=0, busy=0))
    for _ in range(NEVER_READS):
        deaf.send(beat)
    _oversized(workers, OVERSIZED, 1_500_000)

    # --- the learner socket
    junk_l = _junk_frames(rng, LearnerToEngine, [PolicyPublished(version=9, path="/evil", step=0, metrics={"loss": 1.0}), LearnerHello(pid=1, policy_version=0, policy_path="/evil"), LearnerFailed(reason="x")], JUNK)
    fuzz_l = _dealer(learner, b"fuzz-l")
    for frames in junk_l:
        fuzz_l.send_multipart(frames)
    forged = [PolicyPublished(version=99, path="/evil", step=0, metrics={}), LearnerHello(pid=1, policy_version=5, policy_path="/evil", token="guess"), LearnerFailed(reason="forged: would end the run")]
    for i in range(FORGED_LEARNER):
        fuzz_l.send(msgspec.msgpack.encode(forged[i % 3]))
    for i in range(HIT_AND_RUN):
        peer = _dealer(learner, f"l-hit-and-run-{i}".encode())
        peer.send(msgspec.msgpack.encode(forged[0]))
        peer.close()
    _oversized(learner, OVERSIZED, 1_500_000)

    expected = {
        # fuzz-w and never-reads send far past worker.message_burst at once: shed as flooders, their later messages
        # counted with the forger's as banned
        "workers": {"bad_frames": len(junk_w), "rejected_results": 5, "banned_workers": 1, "flooding_peers": 2},
        "learner": {"bad_frames": len(junk_l), "rejected_messages": FORGED_LEARNER + HIT_AND_RUN},
    }

    def counted() -> bool:
        bus = _bus(run_dir)
        return all(bus.get(sock, {}).get(k, 0) >= v for sock, want in expected.items() for k, v in want.items())

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not counted():
        assert engine.poll() is None, out_file.read_text()[-3000:]
        time.sleep(0.5)
    assert counted(), (_bus(run_dir), expected)
    after_fuzz_kb = _vm_hwm_kb(engine.pid)
    for sock in (fuzz, forger, deaf, fuzz_l):
        sock.close(linger=0)

    # --- a real worker, served afterwards: the run goes on to its end
    worker = processes.popen([sys.executable, "-m", "engine.cli", "worker", "--run-dir", str(run_dir), "--worker-id", "real"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    processes.track(engine.pid)
    assert engine.wait(timeout=400) == 0, out_file.read_text()[-4000:]
    worker.wait(timeout=60)
    output = out_file.read_text()
    assert "worker real joined" in output
    store = Store.open(run_dir / "store", readonly=True)
    state = store.state()
    store.close()
    assert state.finished and state.steps_done == 2 and state.policy_version == 3  # not v99: the forgeries changed nothing

    bus = _bus(run_dir)
    for sock, want in expected.items():
        for key, value in want.items():
            assert bus[sock].get(key, 0) == value, (sock, key, bus[sock])
    # the forger's after its ban, and most of the two floods' (their first 2000 or so are taken, some never left)
    assert bus["workers"]["banned_messages"] >= FORGED_RESULTS - 5 + 10_000, bus["workers"]
    assert bus["workers"]["dropped_sends"] >= 1  # the replies to the peers that left or never read
    assert bus["workers"]["disconnects"] >= OVERSIZED + HIT_AND_RUN and bus["learner"]["disconnects"] >= OVERSIZED + HIT_AND_RUN
    growth_mb = (after_fuzz_kb - before_kb) / 1024
    print(f"engine VmHWM {before_kb / 1024:.0f} MB before, {after_fuzz_kb / 1024:.0f} MB after the fuzz; {sum(map(len, (junk_w, junk_l)))} junk frames; {time.monotonic() - started:.0f} s; counters {bus}")
    assert growth_mb < 64, f"the engine's peak memory grew {growth_mb:.0f} MB under fuzz"
    assert len([line for line in output.splitlines() if "ignored a malformed message" in line]) <= 2 * 5  # rate-limited
    assert max(len(line) for line in output.splitlines()) < 1000  # no frame echoed in full
    assert not any(p.exists() for p in paths.ipc_files)
