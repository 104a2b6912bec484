"""What a peer can do to the engine's sockets: CURVE keys on tcp, the learner's token, leases, sends that never
block, size limits, rate-limited warnings."""

from __future__ import annotations

import json
import socket
import stat
import time

import pytest
import trio
import zmq

from engine.peers.auth import LearnerGate, WorkerAuthenticator
from engine.peers.dispatch import Dispatcher, WorkerState
from engine.protocol.keys import BadKey, ensure_run_keys, read_worker_key
from engine.peers.leases import REJECTS_BEFORE_BAN
from engine.protocol.messages import (
    EngineToWorker,
    Heartbeat,
    HelloAgain,
    LearnerHello,
    PlayTask,
    PolicyPublished,
    TaskFailed,
    WorkerToEngine,
)
from engine.peers.ratelimit import Warnings
from engine.protocol.transport import ProtocolError, open_socket, short_id


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_keys_are_owner_only_and_kept_across_a_resume(tmp_path):
    keys = ensure_run_keys(tmp_path / "keys", "tcp://10.0.0.1:5555")
    worker = read_worker_key(tmp_path / "keys" / "worker.key")
    assert worker.server_public == keys.public and worker.public == keys.worker_public and worker.address == "tcp://10.0.0.1:5555"
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    for name in ("server.key", "worker.key"):
        assert stat.S_IMODE((tmp_path / "keys" / name).stat().st_mode) == 0o600
    again = ensure_run_keys(tmp_path / "keys", "tcp://10.0.0.1:6000")
    assert again == keys and read_worker_key(tmp_path / "keys" / "worker.key").address == "tcp://10.0.0.1:6000"
    (tmp_path / "bad.key").write_text(json.dumps({"format": "x"}))
    with pytest.raises(BadKey, match="is not a spade worker key"):
        read_worker_key(tmp_path / "bad.key")


def test_only_the_run_key_gets_through_curve(tmp_path):
    keys = ensure_run_keys(tmp_path / "keys", "")
    good = read_worker_key(tmp_path / "keys" / "worker.key")
    public, secret = zmq.curve_keypair()
    stranger = good.__class__(format=good.format, server_public=good.server_public, public=public.decode(), secret=secret.decode())
    address = f"tcp://127.0.0.1:{_free_port()}"

    async def main():
        auth = WorkerAuthenticator(keys)
        auth.start()
        try:
            with trio.fail_after(20):
                async with (
                    open_socket(zmq.ROUTER, address, bind=True, decode=WorkerToEngine, server_keys=keys, monitor=True) as router,
                    open_socket(zmq.DEALER, address, bind=False, decode=EngineToWorker, identity=b"bad", client_key=stranger) as bad,
                    open_socket(zmq.DEALER, address, bind=False, decode=EngineToWorker, identity=b"plain") as plain,
                    open_socket(zmq.DEALER, address, bind=False, decode=EngineToWorker, identity=b"good", client_key=good) as ok,
                    trio.open_nursery() as nursery,
                ):
                    nursery.start_soon(router.watch_connections)
                    # a refused peer's pipe can be torn down before its send, and a DEALER with no pipe holds the
                    # message: those sends are tried for a moment, never waited on
                    for sock in (bad, plain):
                        with trio.move_on_after(0.5):
                            await sock.send(Heartbeat(worker_id="x", policy_version=0, busy=0))
                    await ok.send(Heartbeat(worker_id="x", policy_version=0, busy=0))
                    ident, _ = await router.receive_from()
                    assert ident == b"good"
                    with trio.move_on_after(1.0):
                        await router.receive_from()
                        raise AssertionError("a peer without the key got a message through")
                    assert auth.counters["refused_peers"] >= 1 and auth.counters["admitted_peers"] == 1
                    assert router.counters["handshakes_failed"] >= 1  # the stranger, refused by the authenticator
                    nursery.cancel_scope.cancel()
        finally:
            auth.stop()

    trio.run(main)


def test_the_learner_gate_takes_one_hello_with_the_token_and_then_that_identity_only():
    gate = LearnerGate("s3cret")
    published = PolicyPublished(version=1, path="/evil", step=0, metrics={})
    assert not gate.admit(b"x", published)  # before any hello
    assert not gate.admit(b"x", LearnerHello(pid=1, policy_version=0, policy_path="", token="guess"))
    assert gate.admit(b"learner", LearnerHello(pid=1, policy_version=0, policy_path="", token="s3cret"))
    assert not gate.admit(b"x", published)  # another identity
    assert not gate.admit(b"learner", LearnerHello(pid=1, policy_version=0, policy_path="", token="s3cret"))  # a second hello
    assert gate.admit(b"learner", published)
    assert gate.counters["rejected_messages"] == 4


def _task(i):
    return PlayTask(task_id=f"t{i}", env_id="e", skill="s", code="", hint="", arm="no_hint", seed=i, step=0)


def test_results_only_from_the_lease_holder_and_sends_that_never_block(tmp_path):
    address = f"ipc://{tmp_path}/d.sock"

    async def main():
        with trio.fail_after(30):
            async with (
                open_socket(zmq.ROUTER, address, bind=True, decode=WorkerToEngine, high_water_mark=10) as router,
                open_socket(zmq.DEALER, address, bind=False, decode=EngineToWorker, identity=b"a") as a,
                open_socket(zmq.DEALER, address, bind=False, decode=EngineToWorker, identity=b"thief") as thief,
                trio.open_nursery() as nursery,
            ):
                for dealer in (a, thief):
                    await dealer.send(Heartbeat(worker_id="x", policy_version=0, busy=0))
                    await router.receive_from()
                dispatcher = Dispatcher(router, retries=0)
                await nursery.start(dispatcher.run)
                dispatcher.add_worker(WorkerState(ident=b"a", worker_id="a", slots=2, isolation="", backend="", policy_version=0, last_seen=time.monotonic()))
                results = {}

                async def run():
                    results["all"] = await dispatcher.run_tasks([_task(0)])

                nursery.start_soon(run)
                assert (await a.receive()).task_id == "t0"
                forged = TaskFailed(task_id="t0", worker_id="a", reason="forged")
                verdicts = [dispatcher.complete(b"thief", forged) for _ in range(REJECTS_BEFORE_BAN)]
                assert verdicts == ["rejected"] * (REJECTS_BEFORE_BAN - 1) + ["ban"]
                assert dispatcher.banned(b"thief") and dispatcher.leases.counters["banned_messages"] == 1
                assert "all" not in results  # the forged answers did not finish a's task
                assert dispatcher.complete(b"a", TaskFailed(task_id="t0", worker_id="a", reason="real")) == "accepted"
                while "all" not in results:  # the waiter wakes on the accepted answer
                    await trio.sleep(0.01)
                assert results["all"][0].reason == "real"
                assert dispatcher.complete(b"a", TaskFailed(task_id="t0", worker_id="a", reason="again")) == "rejected"
                # replies to a peer that is gone, or that never reads, are dropped and counted: never fatal, never a wait
                assert not router.try_send_to(b"nobody", HelloAgain())
                sent = sum(router.try_send_to(b"thief", HelloAgain()) for _ in range(5000))
                assert sent < 5000 and router.counters["dropped_sends"] == 1 + 5000 - sent
                nursery.cancel_scope.cancel()

    trio.run(main)


def test_oversized_frames_drop_the_connection_and_bad_frames_are_counted(tmp_path):
    address = f"ipc://{tmp_path}/m.sock"

    async def main():
        with trio.fail_after(20):
            async with (
                open_socket(zmq.ROUTER, address, bind=True, decode=WorkerToEngine, max_message_bytes=4096, monitor=True) as router,
                open_socket(zmq.DEALER, address, bind=False, decode=EngineToWorker, identity=b"w") as dealer,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(router.watch_connections)
                errors = []

                async def receive():  # the engine is always receiving (which also lets libzmq retire a dropped pipe)
                    while True:
                        try:
                            await router.receive_from()
                        except ProtocolError as exc:
                            errors.append(exc)

                nursery.start_soon(receive)
                await dealer._send_frames([b"\xc1" + b"x" * 200_000])  # oversized: never read
                while router.counters["disconnects"] < 1 or router.counters["connections"] < 2:
                    await trio.sleep(0.01)  # dropped, then back: the first connection and the reconnect
                await dealer._send_frames([b"\x93" + b"y" * 100])  # truncated msgpack, after the reconnect
                await dealer._send_frames([b"a", b"b"])  # a wrong frame count
                while len(errors) < 2:
                    await trio.sleep(0.01)
                assert [e.ident for e in errors] == [b"w", b"w"]
                assert str(errors[0]).startswith("undecodable message (101 bytes)") and "expected 2 frames" in str(errors[1])
                assert router.counters["bad_frames"] == 2 and router.counters["disconnects"] >= 1
                nursery.cancel_scope.cancel()

    trio.run(main)
    assert not (tmp_path / "m.sock").exists()  # the socket file is removed on close


def test_warnings_are_rate_limited_per_kind_and_cut():
    lines, now = [], [0.0]
    warnings = Warnings(lines.append, per_interval=2, interval_s=10, clock=lambda: now[0])
    for _ in range(50):
        warnings.warn("bad", "x" * 100_000)
    warnings.warn("other", "fine")
    now[0] = 11
    warnings.warn("bad", "again")
    assert len(lines) == 5 and max(len(line) for line in lines) < 400
    assert lines[3] == "warning: 48 more 'bad' warnings were not shown in the last 11 s" and lines[4] == "warning: again"
    assert warnings.counts["bad"] == 51
    assert short_id(b"w" * 100_000).endswith("...(100000 chars)") and len(short_id(b"w" * 100_000)) < 90
