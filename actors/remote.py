"""A rollout worker without the engine's filesystem: the run's config and every policy version over ZeroMQ.

    fetcher = PolicyFetcher(sock, cache_dir)           # the receive loop hands it the replies: fetcher.deliver(m)
    folder = await fetcher.fetch(version)              # cache_dir/vNNNNNN, every file checked against its sha256
    joined = await join_remote(sock, fetcher, ...)     # before the hello: config, base model, current policy

The engine (engine/peers/policy_transfer.py) answers a manifest per version (files, sizes, sha256, chunk size) and the
files chunk by chunk; the fetcher keeps `WINDOW` chunk requests in flight, writes each chunk at its offset into
`cache_dir/.partial-vNNNNNN/`, and renames the folder into place once every file matches its checksum. It
resumes: a partial file continues from its size (after a dropped reply, a lost connection, or a restart of the
worker), a file that fails its checksum is fetched once more from the start, and a version already in the cache
with the same manifest is not fetched again. Version 0 is the base model; with LoRA a version holds only the
adapter, applied to the base (actors/inference/hf.py). The worker decides per path: one that exists here is
loaded from here (a shared filesystem), unless `--fetch-policy` says fetch everything.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import msgspec
import trio

from engine.protocol.digests import sha256_file
from engine.protocol.errors import RunFailed
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
from engine.protocol.transport import ProtocolError

WINDOW = 4  # chunk requests in flight
TIMEOUT_S = 20.0  # no reply for this long: ask again for what is outstanding
ATTEMPTS = 4  # timeouts in a row before a fetch fails
MANIFEST_FILE = ".manifest.json"
ADAPTER_CONFIG = "adapter_config.json"


class FetchError(RunFailed):
    """A policy version could not be fetched (the engine no longer has it, or stopped answering)."""


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class PolicyFetcher:
    def __init__(self, sock, cache: Path, *, window: int = WINDOW, timeout_s: float = TIMEOUT_S):
        self._sock = sock
        self.cache = cache
        self._window = window
        self._timeout_s = timeout_s
        self._send, self._receive = trio.open_memory_channel[object](256)
        self._lock = trio.Lock()
        self._receipts: list[int] = []  # tickets of the chunks received, returned with the next request
        self.bytes_fetched = 0

    def deliver(self, message: PolicyManifest | PolicyChunk | FetchFailed) -> None:
        try:
            self._send.send_nowait(message)
        except trio.WouldBlock:
            pass  # nobody is fetching that fast: a dropped reply is asked for again

    async def _next(self, version: int):
        """The next reply about `version` (older ones are dropped), or None after the timeout."""
        with trio.move_on_after(self._timeout_s):
            while True:
                message = await self._receive.receive()
                if message.version == version:
                    if isinstance(message, FetchFailed):
                        raise FetchError(f"policy v{version}: {message.reason}")
                    return message
        return None

    async def manifest(self, version: int) -> PolicyManifest:
        for _ in range(ATTEMPTS):
            await self._sock.send(FetchManifest(version=version))
            message = await self._next(version)
            if isinstance(message, PolicyManifest):
                return message
        raise FetchError(f"policy v{version}: the engine did not send its manifest")

    async def fetch(self, version: int) -> Path:
        async with self._lock:
            manifest = await self.manifest(version)
            final = self.cache / f"v{version:06d}"
            encoded = msgspec.json.encode(manifest)
            if (final / MANIFEST_FILE).is_file() and (final / MANIFEST_FILE).read_bytes() == encoded:
                return final  # fetched before (an earlier run of this worker)
            partial = self.cache / f".partial-v{version:06d}"
            partial.mkdir(parents=True, exist_ok=True)
            for entry in manifest.files:
                await self._file(manifest, partial / entry.name, entry)
            (partial / MANIFEST_FILE).write_bytes(encoded)
            shutil.rmtree(final, ignore_errors=True)
            partial.rename(final)
            return final

    async def _file(self, manifest: PolicyManifest, path: Path, entry: PolicyFile) -> None:
        for attempt in range(2):
            have = path.stat().st_size if path.is_file() else 0
            if have > entry.size or attempt:
                have = 0
            await self._chunks(manifest, path, entry, have)
            if await trio.to_thread.run_sync(sha256_file, path) == entry.sha256:
                return
            _log(f"policy v{manifest.version}: {entry.name} failed its checksum; fetching it again from the start")
        raise FetchError(f"policy v{manifest.version}: {entry.name} fails its checksum twice")

    async def _chunks(self, manifest: PolicyManifest, path: Path, entry: PolicyFile, start: int) -> None:
        version, step = manifest.version, max(1, manifest.chunk_bytes)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, start)
            offsets = list(range(start, entry.size, step))
            outstanding: set[int] = set()
            todo = iter(offsets)
            timeouts = 0

            async def ask(offset: int) -> None:
                outstanding.add(offset)
                receipts, self._receipts = self._receipts[:64], self._receipts[64:]
                await self._sock.send(FetchChunk(version=version, file=entry.name, offset=offset, receipts=receipts))

            for offset in offsets[: self._window]:
                await ask(next(todo))
            while outstanding:
                message = await self._next(version)
                if message is None:
                    timeouts += 1
                    if timeouts >= ATTEMPTS:
                        raise FetchError(f"policy v{version}: the engine stopped sending {entry.name}")
                    for offset in sorted(outstanding):  # replies were dropped: ask again
                        await ask(offset)
                    continue
                if isinstance(message, PolicyChunk):
                    self._receipts.append(message.ticket)  # read: the engine may send another
                if not isinstance(message, PolicyChunk) or message.file != entry.name or message.offset not in outstanding:
                    continue  # a duplicate after a timeout, or a stale manifest
                timeouts = 0
                expected = min(step, entry.size - message.offset)
                if len(message.data) != expected:
                    raise FetchError(f"policy v{version}: {entry.name} at {message.offset}: {len(message.data)} bytes, expected {expected} (did the file change?)")
                os.pwrite(fd, message.data, message.offset)
                outstanding.discard(message.offset)
                self.bytes_fetched += len(message.data)
                if (following := next(todo, None)) is not None:
                    await ask(following)
        finally:
            os.close(fd)


class Joined(msgspec.Struct, kw_only=True):
    config_path: Path  # the run's config, written into the worker's own folder
    model_path: str  # what the backend starts from: the base model, or the current full policy
    version: int  # the policy version `model_path` (or `adapter`) holds
    adapter: str = ""  # a LoRA adapter to load onto the base before the hello


def wants_fetch(path: str, fetch_all: bool) -> bool:
    """Fetch over the wire: asked to, or the engine's path does not exist here (no shared filesystem)."""
    return fetch_all or not path or not Path(path).is_dir()


async def join_remote(sock, fetcher: PolicyFetcher, *, worker_id: str, local_dir: Path, fetch_all: bool, timeout_s: float) -> Joined | None:
    """Before the hello: the run's config, then what the current policy needs; None if no engine answered."""
    info: RunInfo | None = None
    async with trio.open_nursery() as nursery:

        async def pump() -> None:  # the only receiver until the worker's own loop takes over
            nonlocal info
            while True:
                try:
                    message = await sock.receive()
                except ProtocolError as exc:  # say it, keep listening
                    _log(f"[{worker_id}] ignoring a malformed message from the engine: {exc}")
                    continue
                if isinstance(message, RunInfo):
                    info = info or message
                elif isinstance(message, (PolicyManifest, PolicyChunk, FetchFailed)):
                    fetcher.deliver(message)

        nursery.start_soon(pump)
        with trio.move_on_after(timeout_s):
            while info is None:
                await sock.send(FetchRunInfo(worker_id=worker_id))
                with trio.move_on_after(5.0):
                    while info is None:
                        await trio.sleep(0.05)
        if info is None:
            nursery.cancel_scope.cancel()
            return None
        local_dir.mkdir(parents=True, exist_ok=True)
        config_path = local_dir / "config.toml"
        config_path.write_text(info.config)
        joined = await _load_current(fetcher, info, config_path, fetch_all, worker_id)
        nursery.cancel_scope.cancel()
    return joined


async def _local_or_fetched(fetcher: PolicyFetcher, version: int, path: str, fetch_all: bool, worker_id: str) -> str:
    if not wants_fetch(path, fetch_all):
        return path
    started = trio.current_time()
    before = fetcher.bytes_fetched
    folder = await fetcher.fetch(version)
    mb = (fetcher.bytes_fetched - before) / 1e6
    _log(f"[{worker_id}] fetched policy v{version} over the wire into {folder} ({mb:.1f} MB in {trio.current_time() - started:.1f} s)")
    return str(folder)


async def _load_current(fetcher: PolicyFetcher, info: RunInfo, config_path: Path, fetch_all: bool, worker_id: str) -> Joined:
    version = info.policy_version
    if version > 0:
        current = await _local_or_fetched(fetcher, version, info.policy_path, fetch_all, worker_id)
        if not (Path(current) / ADAPTER_CONFIG).is_file():  # a full model: start from it, no base needed
            return Joined(config_path=config_path, model_path=current, version=version)
        base = await _local_or_fetched(fetcher, 0, info.model_path, fetch_all, worker_id)
        return Joined(config_path=config_path, model_path=base, version=version, adapter=current)
    base = await _local_or_fetched(fetcher, 0, info.model_path, fetch_all, worker_id)
    return Joined(config_path=config_path, model_path=base, version=0)


class PolicyFollower:
    """Policy updates whose path is not here: the newest announced version is fetched in the background, and
    new tasks wait (`ready`) until it is loaded, so a remote worker plays as fresh a policy as a local one."""

    def __init__(self, fetcher: PolicyFetcher, request_weights, worker_id: str, loaded: int = 0):
        self._fetcher = fetcher
        self._request_weights = request_weights
        self._worker_id = worker_id
        self.wanted = loaded  # the version the worker joined with
        self._ready = trio.Event()
        self._ready.set()
        self._changed = trio.Event()

    def want(self, version: int) -> None:
        if version > self.wanted:
            self.wanted = version
            if self._ready.is_set():
                self._ready = trio.Event()
            self._changed.set()

    async def ready(self) -> None:
        while not self._ready.is_set():
            await self._ready.wait()

    async def run(self) -> None:
        while True:
            await self._changed.wait()
            self._changed = trio.Event()
            version = self.wanted
            try:
                folder = await _local_or_fetched(self._fetcher, version, "", True, self._worker_id)
                self._request_weights(version, folder)
            except FetchError as exc:  # pruned meanwhile, say: the next version will come
                _log(f"[{self._worker_id}] {exc}; playing on with the policy it has")
            if self.wanted == version:
                self._ready.set()
