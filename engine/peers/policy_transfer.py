"""Policy versions over ZeroMQ, for workers that do not share the engine's filesystem (actors/remote.py fetches).

    server = PolicyServer(paths, sock, run_info)    # run_info() -> RunInfo (the config, the current policy)
    server.known(version, path)                     # each version the learner publishes (or resumed from)
    server.submit(ident, message)                   # from the receive loop: never waits, drops when swamped
    nursery.start_soon(server.run)

A worker asks for `FetchRunInfo`, then per version a `FetchManifest` (every file of the version's folder with its
size and sha256) and `FetchChunk`s of `CHUNK_BYTES`; it checks each file against its checksum and resumes from
what it has. Version 0 is the base model (the run's model folder); a LoRA version's folder holds only the adapter,
so only the adapter travels. The engine runs on the learner's host and serves only folders under
`run_dir/policy`, `run_dir/checkpoints` and the run's model folder, only their top-level files, and only names
of the manifest it sent (the trainer's state in a checkpoint stays home). Requests are served by their own task,
so hashing a large model (on a thread, once per version) never holds up the receive loop.

Chunks are sent on credit: each carries a ticket the worker returns in a later request (proof it read it); a peer
holds at most `WINDOW` unreturned tickets (a request beyond that is dropped, and the worker asks again), tickets
expire after `TICKET_TTL_S` (a reply lost on the way, or a peer that stopped asking: when the table of fetchers is
full every peer's old tickets are dropped first), and at most `MAX_FETCHING` peers hold tickets at once. So a peer
that asks and never reads makes the engine queue a few chunks per TTL, not thousands, and a crowd of such peers
keeps a new worker out for at most one TTL.
"""

from __future__ import annotations

import collections
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import trio

from engine.protocol.digests import sha256_file
from engine.protocol.messages import (
    FetchChunk,
    FetchFailed,
    FetchManifest,
    FetchRunInfo,
    PolicyChunk,
    PolicyFile,
    PolicyManifest,
    RunInfo,
)
from engine.protocol.paths import CHECKPOINT_STATE, CHECKPOINT_SUMMARY, RunPaths
from engine.protocol.transport import MessageSocket

CHUNK_BYTES = 512 * 1024
QUEUE = 64  # requests waiting to be served; more are dropped (the worker asks again after its timeout)
NOT_SERVED = {CHECKPOINT_STATE, CHECKPOINT_SUMMARY}  # a checkpoint's resume state: not part of the policy
WINDOW = 8  # chunks a peer may hold unreturned (the fetcher keeps 4 in flight)
TICKET_TTL_S = 30.0
MAX_FETCHING = 256


def _read(path: Path, offset: int, size: int) -> bytes:
    """One chunk (from the page cache, typically: well under a millisecond, so on the loop's thread)."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read(size)


class PolicyServer:
    def __init__(self, paths: RunPaths, sock: MessageSocket, run_info: Callable[[], RunInfo],
                 on_served: Callable[[bytes], None] = lambda ident: None):
        self._on_served = on_served  # each chunk sent: its peer may ask for the next (engine/peers/flood.py refund)
        self._paths = paths
        self._sock = sock
        self._run_info = run_info
        self._folders: dict[int, Path] = {}
        self._manifests: dict[int, tuple[tuple, PolicyManifest]] = {}
        self._send, self._receive = trio.open_memory_channel[tuple[bytes, object]](QUEUE)
        self._tickets: dict[bytes, dict[int, float]] = {}  # peer -> chunk tickets sent and not yet returned
        self.counters: collections.Counter[str] = collections.Counter()

    def known(self, version: int, path: str) -> None:
        if path:
            self._folders[version] = Path(path)

    def submit(self, ident: bytes, message: FetchRunInfo | FetchManifest | FetchChunk) -> None:
        try:
            self._send.send_nowait((ident, message))
        except trio.WouldBlock:
            self.counters["fetch_requests_dropped"] += 1

    async def run(self) -> None:
        async for ident, message in self._receive:
            match message:
                case FetchRunInfo():
                    try:
                        reply = self._run_info()
                    except (OSError, KeyError, ValueError) as exc:  # run.json or config.toml unreadable right now
                        reply = FetchFailed(version=-1, reason=f"the run's config cannot be read ({exc})")
                case FetchManifest(version=version):
                    reply = await self._manifest_or_failure(version)
                case FetchChunk():
                    if not self._credit(ident, message.receipts):
                        self.counters["chunk_requests_refused"] += 1  # it holds WINDOW chunks it has not shown it read
                        continue
                    reply = await self._chunk(message)
                    if isinstance(reply, PolicyChunk):
                        self._tickets.setdefault(ident, {})[reply.ticket] = time.monotonic()
            if self._sock.try_send_to(ident, reply) and isinstance(reply, PolicyChunk):
                self.counters["chunks_served"] += 1
                self.counters["bytes_served"] += len(reply.data)
                self._on_served(ident)

    def _credit(self, ident: bytes, receipts: list[int]) -> bool:
        """Take `ident`'s returned tickets; whether it may be sent one more chunk."""
        held = self._tickets.get(ident)
        now = time.monotonic()
        if held is None:
            if len(self._tickets) >= MAX_FETCHING:
                self._expire_all(now)  # peers that asked and went away (or never read) lose their tickets
            return len(self._tickets) < MAX_FETCHING
        for ticket in receipts:
            held.pop(ticket, None)
        self._expire(ident, held, now)
        if ident not in self._tickets:
            return True
        return len(held) < WINDOW

    def _expire(self, ident: bytes, held: dict[int, float], now: float) -> None:
        for ticket in [t for t, sent in held.items() if now - sent > TICKET_TTL_S]:
            del held[ticket]
            self.counters["chunk_tickets_expired"] += 1
        if not held:
            del self._tickets[ident]

    def _expire_all(self, now: float) -> None:
        """Every peer's tickets past TICKET_TTL_S dropped: a fetcher that stopped asking holds none for long."""
        for ident, held in list(self._tickets.items()):
            before = len(held)
            self._expire(ident, held, now)
            if ident not in self._tickets and before:
                self.counters["fetchers_expired"] += 1

    # ------------------------------------------------------------ folders
    def _roots(self) -> list[Path]:
        roots = [self._paths.policy, self._paths.checkpoints]
        try:
            roots.append(Path(self._paths.read_model_path()))
        except (OSError, KeyError, ValueError):
            pass
        return [r.resolve() for r in roots]

    def folder(self, version: int) -> Path | None:
        """The folder of `version` if it may be served (None: unknown, gone, or outside the run's folders)."""
        if version < 0:
            return None
        try:
            if version == 0 and 0 not in self._folders:
                folder = Path(self._paths.read_model_path())
            else:
                folder = self._folders.get(version, self._paths.policy_version_dir(version))
            folder = folder.resolve()
        except (OSError, KeyError, ValueError, RuntimeError):
            return None
        if not folder.is_dir() or not any(folder == r or folder.is_relative_to(r) for r in self._roots()):
            return None
        return folder

    def _files(self, folder: Path) -> list[Path]:
        return sorted(p for p in folder.iterdir() if p.is_file() and p.name not in NOT_SERVED and not p.name.startswith("."))

    async def manifest(self, version: int) -> PolicyManifest | None:
        folder = self.folder(version)
        if folder is None:
            return None
        files = self._files(folder)
        stamp = (str(folder), tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files))
        cached = self._manifests.get(version)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        digests = await trio.to_thread.run_sync(lambda: [sha256_file(p) for p in files])
        entries = [PolicyFile(name=p.name, size=s, sha256=d) for p, (_, s, _), d in zip(files, stamp[1], digests)]
        manifest = PolicyManifest(version=version, files=entries, chunk_bytes=CHUNK_BYTES)
        self._manifests[version] = (stamp, manifest)
        for old in [v for v in self._manifests if v not in (0, version) and v < version - 8]:
            del self._manifests[old]  # pruned versions
        return manifest

    async def _manifest_or_failure(self, version: int) -> PolicyManifest | FetchFailed:
        try:
            manifest = await self.manifest(version)
        except OSError as exc:
            manifest, detail = None, f": {exc.strerror or exc}"
        else:
            detail = ""
        if manifest is None:
            self.counters["fetch_failed"] += 1
            return FetchFailed(version=version, reason=f"policy v{version} is not available on the engine{detail} (pruned or unknown): fetch the newest")
        return manifest

    async def _chunk(self, request: FetchChunk) -> PolicyChunk | FetchFailed:
        cached = self._manifests.get(request.version)
        entry = next((f for f in cached[1].files if f.name == request.file), None) if cached else None
        folder = self.folder(request.version) if entry is not None else None
        if entry is None or folder is None or not 0 <= request.offset <= entry.size:
            self.counters["fetch_failed"] += 1
            return FetchFailed(version=request.version, reason=f"no file {request.file[:64]!r} at offset {request.offset} in policy v{request.version}: fetch its manifest first")
        try:
            data = _read(folder / entry.name, request.offset, min(CHUNK_BYTES, entry.size - request.offset))
        except OSError as exc:
            self.counters["fetch_failed"] += 1
            return FetchFailed(version=request.version, reason=f"policy v{request.version} cannot be read ({exc.strerror or exc})")
        return PolicyChunk(version=request.version, file=entry.name, offset=request.offset, data=data, ticket=secrets.randbits(62))
