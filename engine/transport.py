"""Trio over pyzmq: typed, bounded message sockets.

There is no maintained Trio binding for ZeroMQ, so this module waits on the socket's FD with
`trio.lowlevel.wait_readable` and does non-blocking sends and receives. ZeroMQ's FD is edge-triggered: it
signals "events may have changed", so `zmq.EVENTS` is re-checked before every wait, and since a send on the
same socket can consume the edge, the wait is also bounded (10 ms). Only one task may receive
from a socket at a time (trio allows one waiter per FD); sends that hit the high-water mark back off briefly,
which is the backpressure.

    async with open_socket(zmq.DEALER, address, bind=False, decode=EngineToWorker, encode=WorkerToEngine) as sock:
        await sock.send(WorkerHello(...))
        message = await sock.receive()           # for DEALER
        ident, message = await sock.receive_from() # for ROUTER
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
import trio
import zmq

from engine.errors import RunFailed

HIGH_WATER_MARK = 1000
POLL_INTERVAL_S = 0.01


class ProtocolError(Exception):
    """A peer sent bytes that are not a message of this socket's protocol."""


class PeerGone(RunFailed):
    """A ROUTER tried to send to a peer identity that is no longer connected."""


class MessageSocket:
    def __init__(self, sock: zmq.Socket, decode: Any, kind: int):
        self._sock = sock
        self._kind = kind
        self._decoder = msgspec.msgpack.Decoder(decode)
        self._encoder = msgspec.msgpack.Encoder()
        self._receive_lock = trio.Lock()

    async def _wait_readable(self) -> None:
        # A send from another task processes ZeroMQ's pending commands and can swallow the FD's edge while we
        # wait on it, so the wait is bounded and EVENTS is checked again: the edge is the fast path, the poll the
        # guarantee.
        while not (self._sock.getsockopt(zmq.EVENTS) & zmq.POLLIN):
            with trio.move_on_after(POLL_INTERVAL_S):
                await trio.lowlevel.wait_readable(self._sock.FD)

    async def _send_frames(self, frames: list[bytes]) -> None:
        delay = 0.0005
        while True:
            try:
                self._sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
                await trio.lowlevel.checkpoint()
                return
            except zmq.Again:
                await trio.sleep(delay)  # high-water mark reached: back off
                delay = min(delay * 2, 0.05)
            except zmq.ZMQError as exc:
                if exc.errno == zmq.EHOSTUNREACH:
                    raise PeerGone(f"peer {frames[0]!r} is not connected") from None
                raise

    async def _receive_frames(self) -> list[bytes]:
        async with self._receive_lock:
            while True:
                try:
                    return self._sock.recv_multipart(flags=zmq.NOBLOCK)
                except zmq.Again:
                    await self._wait_readable()

    def _decode(self, payload: bytes) -> Any:
        try:
            return self._decoder.decode(payload)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ProtocolError(f"undecodable message ({len(payload)} bytes): {exc}") from None

    async def send(self, message: Any) -> None:
        await self._send_frames([self._encoder.encode(message)])

    async def send_to(self, ident: bytes, message: Any) -> None:
        await self._send_frames([ident, self._encoder.encode(message)])

    async def receive(self) -> Any:
        frames = await self._receive_frames()
        return self._decode(frames[-1])

    async def receive_from(self) -> tuple[bytes, Any]:
        """ROUTER sockets: (peer identity, message). Raises ProtocolError for a malformed message."""
        frames = await self._receive_frames()
        if len(frames) != 2:
            raise ProtocolError(f"expected 2 frames (identity, message), got {len(frames)}")
        return frames[0], self._decode(frames[1])

    def close(self) -> None:
        self._sock.close(linger=100)


@contextlib.asynccontextmanager
async def open_socket(kind: int, address: str, *, bind: bool, decode: Any, identity: bytes | None = None):
    context = zmq.Context.instance()
    sock = context.socket(kind)
    sock.setsockopt(zmq.SNDHWM, HIGH_WATER_MARK)
    sock.setsockopt(zmq.RCVHWM, HIGH_WATER_MARK)
    sock.setsockopt(zmq.LINGER, 100)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity)
    if kind == zmq.ROUTER:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # sending to a vanished peer raises instead of dropping silently
    if bind:
        sock.bind(address)
    else:
        sock.connect(address)
    wrapped = MessageSocket(sock, decode, kind)
    try:
        yield wrapped
    finally:
        wrapped.close()
