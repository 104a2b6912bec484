"""CURVE keys of a run whose worker socket is on tcp: who may talk to the engine from another machine.

    keys = ensure_run_keys(paths.keys, "tcp://10.0.0.5:5555")   # the engine (once per run directory)
    apply_server(sock, keys)                                      # the engine's ROUTER: CURVE server
    key = read_worker_key(Path("worker.key"))                     # a worker (`--key FILE`)
    apply_client(sock, key)                                       # its DEALER: CURVE client

`run_dir/keys/` (mode 0700) holds `server.key` (the engine's key pair) and `worker.key`, the file a user copies
to a worker machine: the engine's public key, the workers' key pair and the address to connect to. Both files are
owner-only (0600). The engine's authenticator (engine/peers/auth.py) admits only the public key in worker.key, so a peer
without the file is refused during the handshake, before any of its frames reach the engine; everything on the
wire is encrypted. ipc sockets take no CURVE keys: their folder is owner-only (engine/protocol/paths.py
`ensure_private_dir`), and a worker's hello must carry the run's ipc secret, `keys/ipc.secret` (0600), which the
engine's own workers and a worker attached with `--run-dir` read there; a hello without it is refused.

Part of the protocol layer (the worker reads its key here): imports nothing of ours but the protocol layer.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import msgspec
import zmq

from engine.protocol.errors import InputError

SERVER_FILE = "server.key"
WORKER_FILE = "worker.key"
IPC_SECRET_FILE = "ipc.secret"
FORMAT = "spade-worker-key/1"
ZAP_DOMAIN = b"spade"


class BadKey(InputError):
    """A key file that cannot be used: missing, unreadable, not ours, or without CURVE support."""


class ServerKeys(msgspec.Struct, frozen=True, kw_only=True):
    public: str  # z85
    secret: str
    worker_public: str  # the one client key the engine admits


class WorkerKey(msgspec.Struct, frozen=True, kw_only=True):
    format: str
    server_public: str
    public: str
    secret: str
    address: str = ""  # where the engine listens (as `up` saw it); `--connect` overrides


def needs_keys(address: str) -> bool:
    """Every non-ipc address is encrypted and authenticated."""
    return not address.startswith(("ipc://", "inproc://"))


def check_curve() -> None:
    if not zmq.has("curve"):
        raise BadKey("this pyzmq/libzmq has no CURVE support, which a tcp worker socket needs: install a pyzmq wheel built with libsodium, or use ipc")


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o600)


def ensure_run_keys(folder: Path, address: str) -> ServerKeys:
    """The run's keys, generated on first use (a resumed run keeps them, so copied worker keys stay valid)."""
    check_curve()
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    server_file, worker_file = folder / SERVER_FILE, folder / WORKER_FILE
    if server_file.is_file() and worker_file.is_file():
        keys = msgspec.json.decode(server_file.read_bytes(), type=ServerKeys)
        worker = read_worker_key(worker_file)
        if worker.address != address:  # the socket moved (up --resume --set worker.address=...): say where now
            _write_private(worker_file, msgspec.json.encode(msgspec.structs.replace(worker, address=address)))
        return keys
    server_public, server_secret = zmq.curve_keypair()
    worker_public, worker_secret = zmq.curve_keypair()
    keys = ServerKeys(public=server_public.decode(), secret=server_secret.decode(), worker_public=worker_public.decode())
    worker = WorkerKey(format=FORMAT, server_public=keys.public, public=worker_public.decode(), secret=worker_secret.decode(), address=address)
    _write_private(server_file, msgspec.json.encode(keys))
    _write_private(worker_file, json.dumps(msgspec.to_builtins(worker), indent=2).encode())
    return keys


def ensure_ipc_secret(folder: Path) -> str:
    """The run's ipc secret, made on first use (a resumed run keeps it, so attached workers stay valid)."""
    import secrets

    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    path = folder / IPC_SECRET_FILE
    if path.is_file():
        secret = path.read_text().strip()
        if len(secret) == 64:
            return secret
    secret = secrets.token_hex(32)
    _write_private(path, secret.encode())
    return secret


def read_ipc_secret(folder: Path) -> str:
    """A worker on the run's ipc socket: the secret its hello carries (from the run directory)."""
    path = folder / IPC_SECRET_FILE
    try:
        secret = path.read_text().strip()
    except OSError as exc:
        raise BadKey(f"{path} cannot be read ({exc.strerror or exc}): a worker on the run's ipc socket needs the run's "
                     f"secret; run it as the user who started `up`, with --run-dir of that run") from None
    if len(secret) != 64:
        raise BadKey(f"{path} is not the run's ipc secret (start `up` again to make it)")
    return secret


def read_worker_key(path: Path) -> WorkerKey:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadKey(f"worker key {path} cannot be read ({exc.strerror or exc}): copy run_dir/keys/{WORKER_FILE} from the engine's machine") from None
    try:
        key = msgspec.json.decode(data, type=WorkerKey)
    except (msgspec.DecodeError, msgspec.ValidationError):
        key = None
    if key is None or key.format != FORMAT or not all(len(k) == 40 for k in (key.server_public, key.public, key.secret)):
        raise BadKey(f"{path} is not a spade worker key (copy run_dir/keys/{WORKER_FILE} from the engine's machine)")
    return key


def key_is_private(path: Path) -> bool:
    """Whether only its owner can read `path` (a worker warns about a key others can read)."""
    return not (path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO))


def apply_server(sock: zmq.Socket, keys: ServerKeys) -> None:
    """Before bind: the socket is a CURVE server whose handshakes the ZAP handler of ZAP_DOMAIN decides."""
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.secret.encode())
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.public.encode())
    sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
    sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)  # no ZAP handler answering: refuse, never admit everybody


def apply_client(sock: zmq.Socket, key: WorkerKey) -> None:
    """Before connect: the socket is a CURVE client of the engine named in `key`."""
    check_curve()
    sock.setsockopt(zmq.CURVE_SERVERKEY, key.server_public.encode())
    sock.setsockopt(zmq.CURVE_PUBLICKEY, key.public.encode())
    sock.setsockopt(zmq.CURVE_SECRETKEY, key.secret.encode())
