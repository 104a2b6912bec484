"""The engine's two sockets, guarded: keys and the authenticator on tcp, size limits, counters, warnings.

    bus = Bus(config, paths, view)
    async with bus.open() as (worker_sock, learner_sock):
        nursery.start_soon(bus.run)              # socket monitors, and the counters into run.json every few s

Counters (`bus.counters()`, and run.json's `bus` when they change, and at the end): for each socket `frames`,
`bad_frames` (undecodable, wrong frame count), `dropped_sends` (peer gone or not reading), `connections`,
`disconnects` (an oversized frame ends its connection), `handshakes_failed`; the workers' also `refused_peers`
(CURVE keys the authenticator refused), `rejected_results`, `late_results`, `banned_workers`, `banned_messages`
(engine/peers/leases.py) and the policy server's; the learner's `rejected_messages` (not from the engine's learner).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable
from pathlib import Path

import trio
import zmq

from engine.peers.auth import HelloGate, LearnerGate, WorkerAuthenticator, new_token
from engine.protocol.config import Config
from engine.protocol.keys import WORKER_FILE, ensure_ipc_secret, ensure_run_keys, needs_keys
from engine.metrics.live import LiveView
from engine.protocol.messages import LearnerToEngine, WorkerToEngine
from engine.protocol.paths import RunPaths, ensure_private_dir
from engine.peers.ratelimit import Warnings
from engine.protocol.transport import open_socket

SEND_HWM = 1000  # per peer: more than any worker's slots plus the broadcasts
RECEIVE_HWM = 100  # per peer: what waits unread; a faster sender is held back by TCP, never dropped
PUBLISH_S = 2.0


def advertised_address(bound: str) -> str:
    """The address a worker on another machine connects to: a wildcard host becomes this host's address."""
    host, _, port = bound.removeprefix("tcp://").rpartition(":")
    if host not in ("0.0.0.0", "*", ""):
        return bound
    try:  # the address of the interface with the default route (a UDP connect sends nothing)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.254.254.254", 1))
            host = probe.getsockname()[0]
    except OSError:
        host = socket.gethostname()
    return f"tcp://{host}:{port}"


class Bus:
    def __init__(self, config: Config, paths: RunPaths, view: LiveView):
        self.paths = paths
        self.view = view
        self.worker_address = config.worker.address or paths.worker_address
        self.max_message_bytes = config.worker.max_message_mb << 20
        self.token = new_token()  # given to the learner child (engine.protocol.lifeline.LEARNER_TOKEN_ENV)
        self.learner_gate = LearnerGate(self.token)
        self.hello_gate = HelloGate(None)  # on an ipc worker socket: the run's ipc secret (open)
        self.warnings = Warnings(view.line)
        self.authenticator: WorkerAuthenticator | None = None
        self.worker_sock = self.learner_sock = None
        self.extra: dict[str, list[Callable[[], dict]]] = {"workers": [], "learner": []}  # more counters (dispatcher, ...)

    @contextlib.asynccontextmanager
    async def open(self):
        keys = None
        ensure_private_dir(self.paths.socket_dir, "the run's socket folder")  # the learner's socket, the workers' on ipc
        if not needs_keys(self.worker_address):
            if self.worker_address != self.paths.worker_address:  # a chosen ipc path: its folder must be as private
                ensure_private_dir(Path(self.worker_address.removeprefix("ipc://")).parent, "worker.address's folder")
            self.hello_gate = HelloGate(ensure_ipc_secret(self.paths.keys))
        if needs_keys(self.worker_address):
            advertised = advertised_address(self.worker_address)
            keys = ensure_run_keys(self.paths.keys, advertised)
            self.authenticator = WorkerAuthenticator(keys)
            self.authenticator.start()
        limits = {"bind": True, "max_message_bytes": self.max_message_bytes, "high_water_mark": SEND_HWM, "receive_high_water_mark": RECEIVE_HWM, "monitor": True}
        try:
            async with (
                open_socket(zmq.ROUTER, self.worker_address, decode=WorkerToEngine, server_keys=keys, **limits) as worker_sock,
                open_socket(zmq.ROUTER, self.paths.learner_address, decode=LearnerToEngine, **limits) as learner_sock,
            ):
                self.worker_sock, self.learner_sock = worker_sock, learner_sock
                if keys is not None:
                    self.view.line(
                        f"remote workers: copy {self.paths.keys / WORKER_FILE} to the worker's machine (keep it private), then run there:\n"
                        f"    bin/spade-engine worker --connect {advertised} --key {WORKER_FILE}"
                    )
                yield worker_sock, learner_sock
        finally:
            self.publish()
            if self.authenticator is not None:
                self.authenticator.stop()
            with contextlib.suppress(OSError):  # empty once the sockets are closed (their files removed)
                self.paths.socket_dir.rmdir()

    def counters(self) -> dict[str, dict[str, int]]:
        out = {}
        for name, sock, own in (("workers", self.worker_sock, self.authenticator), ("learner", self.learner_sock, self.learner_gate)):
            merged: dict[str, int] = dict(sock.counters) if sock is not None else {}
            if own is not None:
                merged.update(own.counters)
            if name == "workers":
                merged.update(self.hello_gate.counters)
            for extra in self.extra[name]:
                merged.update(extra())
            out[name] = dict(sorted(merged.items()))
        return out

    def publish(self) -> None:
        self.paths.update_meta(bus=self.counters())

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.worker_sock.watch_connections)
            nursery.start_soon(self.learner_sock.watch_connections)
            last = None
            while True:
                await trio.sleep(PUBLISH_S)
                now = self.counters()
                if now != last:
                    self.publish()
                    last = now
