"""Policy versions over ZeroMQ: the engine's PolicyServer and the worker's PolicyFetcher on a real socket pair."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import trio
import zmq

from actors.remote import FetchError, PolicyFetcher, PolicyFollower
from engine.protocol.messages import (
    EngineToWorker,
    FetchChunk,
    FetchManifest,
    PolicyChunk,
    PolicyManifest,
    WorkerToEngine,
)
from engine.protocol.paths import RunPaths
from engine.peers.policy_transfer import CHUNK_BYTES, PolicyServer
from engine.protocol.transport import open_socket


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file() and not p.name.startswith(".")}


@pytest.fixture
def run(tmp_path):
    """A run directory with a base model (3 chunks and a bit), a full v1, a LoRA-style v2 and a checkpoint."""
    paths = RunPaths(tmp_path / "run")
    base = tmp_path / "model"
    base.mkdir()
    (base / "model.safetensors").write_bytes(os.urandom(3 * CHUNK_BYTES + 12345))
    (base / "config.json").write_text("{}")
    (base / "empty.txt").write_bytes(b"")
    paths.root.mkdir()
    paths.update_meta(model_path=str(base))
    v1 = paths.policy_version_dir(1)
    v1.mkdir(parents=True)
    (v1 / "model.safetensors").write_bytes(os.urandom(1000))
    v2 = paths.policy_version_dir(2)
    v2.mkdir()
    (v2 / "adapter_config.json").write_text("{}")
    (v2 / "adapter_model.safetensors").write_bytes(os.urandom(777))
    ckpt = paths.checkpoints / "step-000003"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"weights")
    (ckpt / "trainer_state.pt").write_bytes(b"optimizer: stays home")
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "id_rsa").write_text("private")
    return paths, base, ckpt, outside


async def _pair(tmp_path, paths, body, *, drop_every=0):
    """Engine ROUTER + PolicyServer, worker DEALER + PolicyFetcher; `drop_every`: the server drops every n-th reply."""
    address = f"ipc://{tmp_path}/w.sock"
    async with (
        open_socket(zmq.ROUTER, address, bind=True, decode=WorkerToEngine) as router,
        open_socket(zmq.DEALER, address, bind=False, decode=EngineToWorker, identity=b"w") as dealer,
        trio.open_nursery() as nursery,
    ):
        server = PolicyServer(paths, router, run_info=lambda: None)
        fetcher = PolicyFetcher(dealer, tmp_path / "cache", timeout_s=0.5)
        seen = {"n": 0}

        async def engine_loop():
            while True:
                ident, message = await router.receive_from()
                seen["n"] += 1
                if drop_every and seen["n"] % drop_every == 0:
                    continue
                server.submit(ident, message)

        async def worker_loop():
            while True:
                fetcher.deliver(await dealer.receive())

        nursery.start_soon(server.run)
        nursery.start_soon(engine_loop)
        nursery.start_soon(worker_loop)
        try:
            with trio.fail_after(30):
                return await body(server, fetcher)
        finally:
            nursery.cancel_scope.cancel()


def test_a_version_travels_chunked_checksummed_and_resumes(run, tmp_path):
    paths, base, ckpt, outside = run

    async def body(server, fetcher):
        server.known(3, str(ckpt))
        got = await fetcher.fetch(0)
        assert _digest(got) == _digest(base)  # the base model, bit for bit, the empty file too
        again_before = fetcher.bytes_fetched
        assert await fetcher.fetch(0) == got and fetcher.bytes_fetched == again_before  # cached: not fetched twice
        adapter = await fetcher.fetch(2)
        assert sorted(_digest(adapter)) == ["adapter_config.json", "adapter_model.safetensors"]  # only the adapter
        checkpoint = await fetcher.fetch(3)
        assert sorted(_digest(checkpoint)) == ["model.safetensors"]  # the trainer's state stays home
        with pytest.raises(FetchError, match="not available"):
            await fetcher.fetch(7)  # unknown (or pruned)
        server.known(8, str(outside))  # even a path the learner named is served only inside the run's folders
        with pytest.raises(FetchError, match="not available"):
            await fetcher.fetch(8)

    trio.run(_pair, tmp_path, paths, body)


def test_dropped_replies_and_a_partial_file_are_resumed(run, tmp_path):
    paths, base, _, _ = run
    partial = tmp_path / "cache" / ".partial-v000000"
    partial.mkdir(parents=True)
    data = (base / "model.safetensors").read_bytes()
    (partial / "model.safetensors").write_bytes(data[: CHUNK_BYTES + 100])  # a worker restarted mid-file
    (partial / "config.json").write_bytes(b"garbage, longer than the real file")

    async def body(server, fetcher):
        got = await fetcher.fetch(0)
        assert _digest(got) == _digest(base)
        return fetcher.bytes_fetched

    fetched = trio.run(lambda: _pair(tmp_path, paths, body, drop_every=3))
    assert fetched < len(data) + 100  # the first chunk and a bit were not fetched again


def test_the_server_refuses_names_not_in_the_manifest(run, tmp_path):
    paths, *_ = run

    async def body(server, fetcher):
        sock = fetcher._sock
        await sock.send(FetchChunk(version=0, file="config.json", offset=0))  # no manifest asked for yet
        failed = await fetcher._receive.receive()
        assert failed.version == 0 and "manifest first" in failed.reason
        await sock.send(FetchManifest(version=0))
        assert isinstance(await fetcher._receive.receive(), PolicyManifest)
        for name, offset in (("../run.json", 0), ("/etc/passwd", 0), ("config.json", 10**9), ("config.json", -1)):
            await sock.send(FetchChunk(version=0, file=name, offset=offset))
            assert not isinstance(await fetcher._receive.receive(), PolicyChunk)
        assert server.counters["fetch_failed"] == 5

    trio.run(_pair, tmp_path, paths, body)


def test_the_follower_holds_new_tasks_until_the_announced_version_is_loaded(run, tmp_path):
    paths, *_ = run
    loaded = []

    async def body(server, fetcher):
        follower = PolicyFollower(fetcher, lambda version, folder: loaded.append((version, Path(folder).name)), "w")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follower.run)
            await follower.ready()  # nothing announced: ready at once
            follower.want(1)
            follower.want(2)
            await follower.ready()
            nursery.cancel_scope.cancel()

    trio.run(_pair, tmp_path, paths, body)
    assert loaded[-1] == (2, "v000002")


def test_a_peer_that_asks_and_never_reads_gets_only_a_window_of_chunks(run, tmp_path):
    """Chunks go out on credit: without returning the tickets it was sent, a peer gets WINDOW chunks, no more."""
    from engine.peers.policy_transfer import WINDOW

    paths, *_ = run

    async def body(server, fetcher):
        sock = fetcher._sock
        manifest = await fetcher.manifest(0)
        name = next(f.name for f in manifest.files if f.name == "model.safetensors")
        for _ in range(3 * WINDOW):
            await sock.send(FetchChunk(version=0, file=name, offset=0))
        await _handled(server, 3 * WINDOW)
        assert server.counters["chunks_served"] == WINDOW and server.counters["chunk_requests_refused"] == 2 * WINDOW
        tickets = []
        while len(tickets) < WINDOW:
            tickets.append((await fetcher._receive.receive()).ticket)
        await sock.send(FetchChunk(version=0, file=name, offset=0, receipts=tickets[:2]))  # two read: two more
        await sock.send(FetchChunk(version=0, file=name, offset=0))
        await sock.send(FetchChunk(version=0, file=name, offset=0))
        await _handled(server, 3 * WINDOW + 3)
        assert server.counters["chunks_served"] == WINDOW + 2

    trio.run(_pair, tmp_path, paths, body)


async def _handled(server, requests: int) -> None:
    """Wait until the server has served or refused `requests` chunk requests in all."""
    with trio.fail_after(30):
        while server.counters["chunks_served"] + server.counters["chunk_requests_refused"] < requests:
            await trio.sleep(0.01)


def test_stalled_fetchers_tickets_expire_and_a_new_worker_then_gets_chunks(run, monkeypatch):
    """MAX_FETCHING peers that each took a chunk and never came back fill the table of fetchers: a new worker is
    refused until their tickets pass TICKET_TTL_S, then it is served (the stalled peers' tickets are dropped)."""
    import engine.peers.policy_transfer as transfer

    paths, *_ = run
    clock = {"now": 1000.0}
    monkeypatch.setattr(transfer.time, "monotonic", lambda: clock["now"])
    server = transfer.PolicyServer(paths, sock=None, run_info=lambda: None)
    for i in range(transfer.MAX_FETCHING):
        assert server._credit(b"stalled-%d" % i, [])
        server._tickets.setdefault(b"stalled-%d" % i, {})[i] = clock["now"]  # a chunk sent, its ticket never returned
    assert not server._credit(b"honest", [])  # the table is full
    clock["now"] += transfer.TICKET_TTL_S / 2
    assert not server._credit(b"honest", [])  # not yet: the tickets are young
    clock["now"] += transfer.TICKET_TTL_S
    assert server._credit(b"honest", [])
    assert len(server._tickets) == 0
    assert server.counters["chunk_tickets_expired"] == transfer.MAX_FETCHING
    assert server.counters["fetchers_expired"] == transfer.MAX_FETCHING
