"""Trio over pyzmq: typed, bounded message sockets that no peer can crash or stall.

There is no maintained Trio binding for ZeroMQ, so this module waits on the socket's FD with
`trio.lowlevel.wait_readable` and does non-blocking sends and receives. ZeroMQ's FD is edge-triggered: it
signals "events may have changed", so `zmq.EVENTS` is re-checked before every wait, and since a send on the
same socket can consume the edge, the wait is also bounded (0.2 ms doubling to 10 ms). Only one task may receive from a socket at a
time (trio allows one waiter per FD).

    async with open_socket(zmq.DEALER, address, bind=False, decode=EngineToWorker, max_message_bytes=n) as sock:
        await sock.send(WorkerHello(...))
        message = await sock.receive()           # for DEALER
        ident, message = await sock.receive_from() # for ROUTER; ProtocolError (with .ident) for a bad frame
        batch = await sock.receive_batch_from(64)  # ROUTER: what waits now, [(ident, message or ProtocolError)]
        sock.try_send_to(ident, reply)           # ROUTER: never blocks, never raises; False = dropped, counted

What a peer can do to a socket, and what happens:
- a frame larger than `max_message_bytes` (ZMQ_MAXMSGSIZE): libzmq drops the connection before reading it;
- bytes that are not a message of the socket's union, or the wrong number of frames: `ProtocolError`, counted in
  `counters["bad_frames"]` (its text is cut, so a huge field is never echoed);
- disconnect, or never read: `try_send_to` drops the reply (`dropped_sends`); the high-water marks bound what
  waits for a slow peer. `send_to` (the engine to its own learner, which it cannot do without) waits out a full
  queue instead and raises `PeerGone` for a peer that is not connected.
`watch_connections` counts connections, disconnects (an oversized frame is one) and failed handshakes (a CURVE
peer without the key) from ZeroMQ's socket monitor. A bound ipc socket is owner-only and its file is removed on
close.
"""

from __future__ import annotations

import collections
import contextlib
import os
from pathlib import Path
from typing import Any

import msgspec
import trio
import zmq
from zmq.utils.monitor import parse_monitor_message

from engine.protocol.errors import RunFailed
from engine.protocol.keys import ServerKeys, WorkerKey, apply_client, apply_server

HIGH_WATER_MARK = 1000
# Plain ints: pyzmq's enum constants cost an enum operation on every call of the hot path.
_EVENTS, _POLLIN, _NOBLOCK, _SNDMORE = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.NOBLOCK), int(zmq.SNDMORE)
YIELD_EVERY = 8  # a receiver that finds messages waiting yields to the other tasks after this many
POLL_INTERVAL_S = 0.01
FIRST_POLL_S = 0.0002
ERROR_CHARS = 240  # a ProtocolError's detail is cut to this many characters


class ProtocolError(Exception):
    """A peer sent bytes that are not a message of this socket's protocol; `ident` names the peer (ROUTER)."""

    def __init__(self, text: str, ident: bytes = b""):
        super().__init__(text)
        self.ident = ident


class PeerGone(RunFailed):
    """A ROUTER tried to send to a peer identity that is no longer connected."""


def short_id(ident: bytes | str, limit: int = 64) -> str:
    """A peer identity (or any peer-chosen name) fit for a log line: printable, at most ~`limit` characters."""
    text = ident.decode("utf-8", "replace") if isinstance(ident, bytes) else str(ident)
    text = "".join(c if c.isprintable() else "?" for c in text[: limit + 1])
    return text if len(text) <= limit else f"{text[:limit]}...({len(ident)} chars)"


class MessageSocket:
    def __init__(self, sock: zmq.Socket, decode: Any, kind: int):
        self._sock = sock
        self._kind = kind
        self._decoder = msgspec.msgpack.Decoder(decode)
        self._encoder = msgspec.msgpack.Encoder()
        self._receiving = False  # one receiver at a time (trio allows one waiter per FD)
        self._unyielded = 0
        self._monitor: zmq.Socket | None = None
        self._waiting: trio.CancelScope | None = None  # the receiver's bounded wait, cut short after a send
        self.counters: collections.Counter[str] = collections.Counter()

    def start_monitor(self) -> None:
        """Attach ZeroMQ's socket monitor now (before bind), so `watch_connections` misses no event."""
        events = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
        events |= zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
        self._monitor = self._sock.get_monitor_socket(events)

    async def _wait_readable(self, sock: zmq.Socket | None = None) -> None:
        # A send from another task processes ZeroMQ's pending commands and can swallow the FD's edge while we
        # wait on it, so the wait is bounded and EVENTS is checked again: the edge is the fast path, the poll the
        # guarantee, and a send that finds a message waiting ends the wait at once (`_after_send`).
        # The bound starts short (a missed edge under load costs well under a millisecond) and doubles up to
        # POLL_INTERVAL_S while nothing comes (an idle socket costs ~100 wake-ups a second).
        sock = sock or self._sock
        interval = FIRST_POLL_S
        while not (sock.getsockopt(_EVENTS) & _POLLIN):
            with trio.move_on_after(interval) as scope:
                if sock is self._sock:
                    self._waiting = scope
                await trio.lowlevel.wait_readable(sock.FD)
            if sock is self._sock:
                self._waiting = None
            interval = min(interval * 2, POLL_INTERVAL_S)

    def _after_send(self) -> None:
        if self._waiting is not None and self._sock.getsockopt(_EVENTS) & _POLLIN:
            self._waiting.cancel()

    async def _send_frames(self, frames: list[bytes]) -> None:
        delay = 0.0005
        while True:
            try:
                self._sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
                self._after_send()
                await trio.lowlevel.checkpoint()
                return
            except zmq.Again:
                await trio.sleep(delay)  # high-water mark reached: back off
                delay = min(delay * 2, 0.05)
            except zmq.ZMQError as exc:
                if exc.errno == zmq.EHOSTUNREACH:
                    raise PeerGone(f"peer {short_id(frames[0])} is not connected") from None
                raise

    async def _receive_frames(self) -> list[bytes]:
        if self._receiving:
            raise RuntimeError("another task is already receiving on this socket")
        self._receiving = True
        try:
            while True:
                try:
                    frames = self._sock.recv_multipart(flags=_NOBLOCK)
                except zmq.Again:
                    self._unyielded = 0
                    await self._wait_readable()
                    continue
                self.counters["frames"] += 1
                self._unyielded += 1
                if self._unyielded >= YIELD_EVERY:  # a busy socket does not starve the other tasks
                    self._unyielded = 0
                    await trio.lowlevel.checkpoint()
                return frames
        finally:
            self._receiving = False

    def _decode(self, payload: bytes, ident: bytes = b"") -> Any:
        try:
            return self._decoder.decode(payload)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            self.counters["bad_frames"] += 1
            detail = str(exc)
            detail = detail if len(detail) <= ERROR_CHARS else detail[:ERROR_CHARS] + "..."
            raise ProtocolError(f"undecodable message ({len(payload)} bytes): {detail}", ident) from None

    async def send(self, message: Any) -> None:
        await self._send_frames([self._encoder.encode(message)])

    async def send_to(self, ident: bytes, message: Any) -> None:
        """Waits while the peer's queue is full; PeerGone if it is not connected. For a peer the engine needs."""
        await self._send_frames([ident, self._encoder.encode(message)])

    def try_send_to(self, ident: bytes, message: Any) -> bool:
        """Send now or drop: a gone peer or a full queue (a peer that does not read) costs a count, nothing else."""
        try:
            self._sock.send(ident, _SNDMORE | _NOBLOCK, copy=False)  # a gone or full peer raises here, at the first frame
            self._sock.send(self._encoder.encode(message), _NOBLOCK, copy=False)
            self._after_send()
            return True
        except zmq.Again:
            self.counters["dropped_sends"] += 1
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            self.counters["dropped_sends"] += 1
        return False

    async def receive(self) -> Any:
        frames = await self._receive_frames()
        return self._decode(frames[-1])

    async def receive_from(self) -> tuple[bytes, Any]:
        """ROUTER sockets: (peer identity, message). Raises ProtocolError for a malformed message."""
        ident, message = self._pair(await self._receive_frames())
        if isinstance(message, ProtocolError):
            raise message
        return ident, message

    async def receive_batch_from(self, limit: int) -> list[tuple[bytes, Any]]:
        """ROUTER sockets: the messages waiting now, at most `limit` (it waits for the first), as (peer identity,
        message) in arrival order; a malformed one comes as (identity, ProtocolError). The caller can check what
        repeats across them at once (the engine's result checks), and the lot costs one trip through the scheduler."""
        batch = [self._pair(await self._receive_frames())]
        while len(batch) < limit:
            try:
                frames = self._sock.recv_multipart(flags=_NOBLOCK)
            except zmq.Again:
                break
            self.counters["frames"] += 1
            batch.append(self._pair(frames))
        self._unyielded += len(batch) - 1
        if self._unyielded >= YIELD_EVERY:  # a busy socket does not starve the other tasks
            self._unyielded = 0
            await trio.lowlevel.checkpoint()
        return batch

    def _pair(self, frames: list[bytes]) -> tuple[bytes, Any]:
        if len(frames) != 2:
            self.counters["bad_frames"] += 1
            return frames[0], ProtocolError(f"expected 2 frames (identity, message), got {len(frames)}", frames[0])
        try:
            return frames[0], self._decode(frames[1], frames[0])
        except ProtocolError as exc:
            return frames[0], exc

    async def watch_connections(self) -> None:
        """Count what ZeroMQ's monitor reports: connections, disconnects, failed handshakes (run it in a task)."""
        if self._monitor is None:
            self.start_monitor()
        monitor = self._monitor
        names = {zmq.EVENT_ACCEPTED: "connections", zmq.EVENT_DISCONNECTED: "disconnects"}
        try:
            while True:
                try:
                    event = parse_monitor_message(monitor.recv_multipart(flags=zmq.NOBLOCK))
                except zmq.Again:
                    await self._wait_readable(monitor)
                    continue
                self.counters[names.get(event["event"], "handshakes_failed")] += 1
        finally:
            self._stop_monitor()

    def _stop_monitor(self) -> None:
        if self._monitor is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._sock.disable_monitor()
            self._monitor.close(linger=0)
            self._monitor = None

    def close(self) -> None:
        self._stop_monitor()
        self._sock.close(linger=100)


def train_batch_limit(config) -> int:
    """The learner's MAXMSGSIZE (its only sender is its own engine, on an owner-only ipc socket, and a batch it
    dropped would stall the run, so the bound is generous): a TrainBatch holds at most a step's plays and designs
    plus the delayed designer samples, each within `worker.max_message_mb`; four times that, and never under 4 GiB."""
    c = config.curriculum
    samples = c.envs_per_step * (config.play.plays_per_env + config.play.hint_plays_per_env + 2 * c.refresh_interval + 2)
    return max(4 << 30, 4 * (samples + 64) * (config.worker.max_message_mb << 20))


def _ipc_file(address: str) -> Path | None:
    return Path(address.removeprefix("ipc://")) if address.startswith("ipc://") else None


@contextlib.asynccontextmanager
async def open_socket(
    kind: int,
    address: str,
    *,
    bind: bool,
    decode: Any,
    identity: bytes | None = None,
    max_message_bytes: int = -1,
    high_water_mark: int = HIGH_WATER_MARK,
    receive_high_water_mark: int | None = None,
    server_keys: ServerKeys | None = None,
    client_key: WorkerKey | None = None,
    monitor: bool = False,
):
    """The high-water marks bound each peer's queue (messages); `max_message_bytes` (-1: none) is ZMQ_MAXMSGSIZE;
    `monitor`: count connection events from the start (run `watch_connections`); `server_keys` / `client_key` make it a CURVE server /
    client (engine/protocol/keys.py)."""
    context = zmq.Context.instance()
    sock = context.socket(kind)
    sock.setsockopt(zmq.SNDHWM, high_water_mark)
    sock.setsockopt(zmq.RCVHWM, receive_high_water_mark or high_water_mark)
    sock.setsockopt(zmq.LINGER, 100)
    sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity)
    if kind == zmq.ROUTER:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # sending to a vanished peer raises instead of dropping silently
    if server_keys is not None:
        apply_server(sock, server_keys)
    if client_key is not None:
        apply_client(sock, client_key)
    ipc = _ipc_file(address) if bind else None
    wrapped = MessageSocket(sock, decode, kind)
    if monitor:
        wrapped.start_monitor()
    try:
        if bind:
            sock.bind(address)
            if ipc is not None:
                os.chmod(ipc, 0o600)  # a socket file only its owner may connect to
        else:
            sock.connect(address)
    except BaseException:
        wrapped._stop_monitor()
        sock.close(linger=0)
        raise
    try:
        yield wrapped
    finally:
        wrapped.close()
        if ipc is not None:
            ipc.unlink(missing_ok=True)
