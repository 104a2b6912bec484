"""End to end: a key-holding peer that heartbeats but never reads its tasks, and one that floods the worker socket,
are both shed within a few of their own messages, and the engine's worker does their share: the run finishes.

The bounds are counted in the peers' own beats and messages, not in wall seconds (engine/peers/dispatch.py's
`unread_heartbeats`, engine/peers/flood.py's budget), so a busy machine stretches them with the peers' pace; the
seconds it took are printed, not asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import msgspec
import zmq

from engine.protocol.keys import read_ipc_secret
from engine.protocol.messages import DesignTask, EngineToWorker, Heartbeat, PlayTask, ValidateTask, WorkerHello
from engine.protocol.paths import RunPaths
from tests.e2e.helpers import state_and_done_ids, up_command, up_script, wait_for_text

BEAT_S = 1.0
UNREAD_BEATS = 4
FLOOD = 10_000  # heartbeats at once, past worker.message_burst (2000)


def _peer(address: str, identity: str, secret: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, identity.encode())
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    sock.send(msgspec.msgpack.encode(WorkerHello(worker_id=identity, pid=os.getpid(), slots=1, isolation="none", backend="bad", policy_version=0, secret=secret)))
    return sock


def _deaf_peer(address: str, secret: str, output, stop) -> tuple[list[str], int]:
    """Takes what it is sent but every heartbeat (one each BEAT_S) says it read nothing, as a peer that does not
    read its socket would, until the engine says it dropped it. Returns the tasks it was sent, and the beats it sent
    from its first task to the engine's warning."""
    sock = _peer(address, "deaf", secret)
    beat = msgspec.msgpack.encode(Heartbeat(worker_id="deaf", policy_version=0, busy=0, tasks_received=0))
    decoder, taken, beats = msgspec.msgpack.Decoder(EngineToWorker), [], 0
    try:
        while not stop() and "warning: worker deaf left a task unread" not in output.read_text():
            while sock.poll(0):
                message = decoder.decode(sock.recv())
                if isinstance(message, (DesignTask, PlayTask, ValidateTask)):
                    taken.append(message.task_id)
            sock.send(beat)
            beats += bool(taken)
            time.sleep(BEAT_S)
    finally:
        sock.close()
    return taken, beats


def _flooding_peer(address: str, secret: str) -> None:
    """Joins, then sends FLOOD heartbeats as fast as the socket takes them (all delivered: they linger after close)."""
    sock = _peer(address, "flood", secret)
    beat = msgspec.msgpack.encode(Heartbeat(worker_id="flood", policy_version=0, busy=0))
    sock.setsockopt(zmq.SNDTIMEO, 60_000)
    sock.setsockopt(zmq.LINGER, 60_000)
    try:
        for _ in range(FLOOD):
            sock.send(beat)
    finally:
        sock.close()


def test_a_deaf_peer_and_a_flooding_peer_are_shed_and_the_run_finishes(tiny_model_path, tmp_path, processes):  # noqa: F811
    run_dir = tmp_path / "run"
    output = tmp_path / "engine.out"
    extra = ["--set", f"worker.heartbeat_s={BEAT_S}", "--set", f"worker.unread_heartbeats={UNREAD_BEATS}"]
    with open(output, "w") as out:
        engine = processes.popen(up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=3, extra=extra), stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 420
    wait_for_text(output, "worker w0 joined", deadline)
    processes.track(engine.pid)
    address, secret = RunPaths(run_dir).worker_address, read_ipc_secret(RunPaths(run_dir).keys)
    _flooding_peer(address, secret)
    started = time.monotonic()
    taken, beats = _deaf_peer(address, secret, output, stop=lambda: engine.poll() is not None or time.monotonic() > deadline)
    print(f"deaf peer: sent {len(taken)} tasks, shed {beats} of its beats after its first ({time.monotonic() - started:.1f} s after it joined)")
    assert engine.wait(timeout=300) == 0, output.read_text()[-4000:]
    text = output.read_text()
    assert taken, text[-4000:]
    assert f"warning: worker deaf left a task unread over {UNREAD_BEATS} of its heartbeats" in text, text[-4000:]
    # The flooding peer does not read its socket either: when the engine handed it a task before its 2000th
    # message, its first beats drop it as unread too, and the flood warning then names it a peer, no longer a worker.
    flood_dropped_unread = "warning: worker flood left a task unread" in text
    flood_name = "peer flood" if flood_dropped_unread else "worker flood"
    assert f"warning: {flood_name} sent more than 2000 messages at once" in text, text[-4000:]
    counters = json.loads((run_dir / "run.json").read_text())["bus"]["workers"]
    assert counters["unread_workers"] == 1 + flood_dropped_unread and counters["flooding_peers"] == 1, counters
    assert counters["banned_messages"] >= FLOOD // 2, counters  # most of the flood ignored
    state, done = state_and_done_ids(run_dir)
    assert state.finished and state.steps_done == 3
    assert set(taken) <= done, (taken, sorted(done))  # w0 did what the deaf peer was sent
