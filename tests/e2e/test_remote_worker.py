"""A worker on another host: `up` on a CURVE tcp socket, a worker in its own network namespace (a veth pair; two
loopback addresses where namespaces cannot be made) with only the key file and an empty folder of its own.

It receives the config and the policy over the wire (every version, `--fetch-policy`: the test shares one disk, so
the engine's paths would exist), plays, and its results are trained; a worker with a key the run did not issue is
refused; a key holder that forges results for the remote worker's leases is rejected and banned.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
import zmq

from engine.protocol.keys import apply_client, ensure_run_keys, read_worker_key
from engine.protocol.messages import (
    EngineToWorker,
    Heartbeat,
    HelloAgain,
    TaskFailed,
    unpack_ints,
    unpack_mask,
)
from engine.protocol.paths import RunPaths
from storage.store import Store
from tests.e2e.helpers import up_command, up_script


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


@pytest.fixture
def network():
    """(engine host, argv prefix that runs a command on the worker's host, what it is)."""
    tag = os.getpid() % 10_000
    name, host_if, peer_if = f"spade{tag}", f"vsp{tag}a", f"vsp{tag}b"
    engine_ip, worker_ip = f"10.213.{tag % 250}.1", f"10.213.{tag % 250}.2"
    made = False
    try:
        _ip("netns", "add", name)
        made = True
        _ip("link", "add", host_if, "type", "veth", "peer", "name", peer_if)
        _ip("link", "set", peer_if, "netns", name)
        _ip("addr", "add", f"{engine_ip}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("netns", "exec", name, "ip", "addr", "add", f"{worker_ip}/30", "dev", peer_if)
        _ip("netns", "exec", name, "ip", "link", "set", peer_if, "up")
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
    except (OSError, subprocess.SubprocessError) as exc:
        reason = getattr(exc, "stderr", b"") or str(exc)
        print(f"network namespaces cannot be made here ({reason!r}): the worker uses a second loopback address")
        if made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        yield "127.0.0.2", [], "loopback 127.0.0.1 -> 127.0.0.2"
        return
    try:
        yield engine_ip, ["ip", "netns", "exec", name], f"network namespace {name} ({worker_ip}) -> {engine_ip}"
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _forge(address: str, key_file: Path, task_ids: list[str]) -> None:
    """A key holder that never said hello answers tasks leased to the remote worker (ids it predicted)."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, b"forger")
    sock.setsockopt(zmq.LINGER, 2000)
    apply_client(sock, read_worker_key(key_file))
    sock.connect(address)
    encoder, decoder = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(EngineToWorker)
    sock.send(encoder.encode(Heartbeat(worker_id="forger", policy_version=0, busy=0)))
    assert sock.poll(10_000), "the engine never answered a key holder"
    assert isinstance(decoder.decode(sock.recv()), HelloAgain)  # through the handshake: it is not a member
    for task_id in task_ids:
        sock.send(encoder.encode(TaskFailed(task_id=task_id, worker_id="remote", reason="forged")))
    sock.close()


def test_a_remote_worker_attaches_with_the_key_and_trains(tiny_model_path, tmp_path, processes, network):  # noqa: F811
    host, on_worker_host, how = network
    print(f"worker host: {how}")
    address = f"tcp://{host}:{_free_port(host)}"
    run_dir = tmp_path / "run"
    engine_out = tmp_path / "engine.out"
    extra = ["--set", "worker.count=0", "--set", f"worker.address={json.dumps(address)}"]
    with open(engine_out, "w") as out:
        engine = processes.popen(up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=2, extra=extra), stdout=out, stderr=subprocess.STDOUT)
    printed = _wait_for(lambda: "bin/spade-engine worker --connect" in engine_out.read_text() and engine_out.read_text(), 120, "the worker command")
    assert f"bin/spade-engine worker --connect {address} --key worker.key" in printed, printed
    elsewhere = tmp_path / "elsewhere"  # the worker's machine: the key file and an empty folder, nothing of the run
    (elsewhere / "own").mkdir(parents=True)
    shutil.copy(run_dir / "keys" / "worker.key", elsewhere / "worker.key")
    os.chmod(elsewhere / "worker.key", 0o600)
    worker_cmd = [*on_worker_host, sys.executable, "-m", "engine.cli", "worker", "--connect", address]

    # a key the run did not issue (the server's public key, but another client pair) is refused at the handshake
    ensure_run_keys(tmp_path / "other-keys", address)
    stranger = json.loads((tmp_path / "other-keys" / "worker.key").read_text())
    stranger["server_public"] = json.loads((elsewhere / "worker.key").read_text())["server_public"]
    (elsewhere / "stranger.key").write_text(json.dumps(stranger))
    os.chmod(elsewhere / "stranger.key", 0o600)
    refused = processes.run([*worker_cmd, "--key", str(elsewhere / "stranger.key"), "--run-dir", str(elsewhere / "x"), "--timeout", "5"], timeout=120)
    assert refused.returncode == 1 and "no engine answered" in refused.stderr, refused.stdout + refused.stderr
    keyless = processes.run([*worker_cmd, "--run-dir", str(elsewhere / "y")], timeout=120)
    assert keyless.returncode == 2 and "give --key FILE" in keyless.stderr, keyless.stderr

    worker_log = tmp_path / "worker.out"
    with open(worker_log, "w") as log:
        worker = processes.popen(
            [*worker_cmd, "--key", str(elsewhere / "worker.key"), "--run-dir", str(elsewhere / "own"), "--worker-id", "remote", "--fetch-policy"],
            stdout=log, stderr=subprocess.STDOUT,
        )
    _wait_for(lambda: "worker remote joined" in engine_out.read_text(), 240, "the remote worker to join")
    forged = ["s0000-e00-a0", "s0000-e01-a0"] * 4  # the step-0 design tasks, leased to `remote` just now
    _forge(address, elsewhere / "worker.key", forged)

    processes.track(engine.pid)
    assert engine.wait(timeout=420) == 0, engine_out.read_text()[-4000:]
    assert worker.wait(timeout=60) == 0, worker_log.read_text()[-4000:]  # the engine's shutdown ends it
    log = worker_log.read_text()
    own = elsewhere / "own" / "fetched"
    assert f"fetched policy v0 over the wire into {own / 'v000000'}" in log, log[-3000:]
    assert f"fetched policy v1 over the wire into {own / 'v000001'}" in log, log[-3000:]
    assert (elsewhere / "own" / "config.toml").read_text() == (run_dir / "config.toml").read_text()

    store = Store.open(run_dir / "store", readonly=True)
    try:
        envs = [e for e in store.environments() if e.source == "designed"]
        agent = [t for t in store.trajectories() if t.role == "agent" and t.status != "failed"]
        batches, state = list(store.batches()), store.state()
    finally:
        store.close()
    assert state.finished and state.policy_version == len(batches) == 3
    assert envs and {e.worker_id for e in envs} == {"remote"}  # the forged failures did not take the designs
    trained = {entry.trajectory_key for b in batches for entry in b.entries}
    assert agent and any(key.endswith(t.sample_id) for t in agent for key in trained)  # its plays were trained
    for t in agent:  # max_staleness 0: step 1 was played by v1, which came over the wire
        versions = unpack_ints(t.sample.versions)[unpack_mask(t.sample.loss_mask) == 1]
        assert set(versions.tolist()) == {t.step}

    bus = json.loads((run_dir / "run.json").read_text())["bus"]["workers"]
    assert bus["refused_peers"] >= 1 and bus["admitted_peers"] >= 2
    assert bus["rejected_results"] == 5 and bus["banned_workers"] == 1 and bus["banned_messages"] == len(forged) - 5, bus
    assert bus["bytes_served"] >= sum(p.stat().st_size for p in Path(tiny_model_path).iterdir())
    assert "rejected a result for task s0000-e00-a0 from forger" in engine_out.read_text()
    assert not any(p.exists() for p in RunPaths(run_dir).ipc_files) and not RunPaths(run_dir).socket_dir.exists()  # removed at exit
