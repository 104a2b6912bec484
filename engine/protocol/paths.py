"""Where a run keeps its files, and the addresses of its sockets.

    run_dir/config.toml        the resolved config          run_dir/store/          LMDB
    run_dir/metrics.jsonl      one line per step            run_dir/logs/           one log per process
    run_dir/policy/vNNNNNN/    published policy versions    run_dir/checkpoints/    learner checkpoints
    run_dir/run.json           model path, start, placement, counters (RunMeta, engine/protocol/run_meta.py)
    run_dir/engine.lock        held (flock) by the engine while it runs; the kernel drops it when the engine dies
    run_dir/keys/              CURVE keys of a tcp worker socket (owner-only): server.key, worker.key (engine/protocol/keys.py)

Shipped data every side reads lives in engine/protocol/data/, named once here: the seed environments (DATA/seeds/,
with manifest.json; the tool-use setting's in DATA/seeds/tool_use/), the Reasoning-Gym hard configurations
(reasoning_gym_hard.json) and the default corpus (corpus.jsonl). The engine and the actors both import the protocol
layer, so neither reaches into the other's folder for a file.

Sockets: the learner's is always ipc; the workers' is ipc unless `worker.address` is tcp://HOST:PORT. The engine
removes its ipc socket files when it closes them (engine/protocol/transport.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from engine.protocol.errors import InputError
from engine.protocol.run_meta import RunMeta, read_run_meta, require_model_path, update_run_meta

DATA = Path(__file__).resolve().parent / "data"
SEEDS_DIR = DATA / "seeds"
TOOL_USE_SEEDS_DIR = SEEDS_DIR / "tool_use"
RG_HARD_FILE = DATA / "reasoning_gym_hard.json"
DEFAULT_CORPUS = DATA / "corpus.jsonl"
SEEDS_BY_SETTING = {"games": SEEDS_DIR, "tool_use": TOOL_USE_SEEDS_DIR}  # `curriculum.setting` -> its seed folder


class RunInUse(InputError):
    """Another engine holds the run directory."""


class BadPath(InputError):
    """A path given by the user cannot be used: missing, not a text file, not writable."""


def user_path(text: str | Path) -> Path:
    """A path the user typed, resolved against the working directory the command was started in."""
    return Path(text).expanduser().resolve()


def check_text_file(path: Path, what: str) -> str:
    """The UTF-8 text of `path`, or BadPath naming what is wrong with it."""
    if not path.exists():
        raise BadPath(f"{what} {path} does not exist")
    if not path.is_file():
        raise BadPath(f"{what} {path} is not a file")
    try:
        text = path.read_bytes().decode("utf-8")
    except PermissionError:
        raise BadPath(f"{what} {path} cannot be read (permission denied)") from None
    except UnicodeDecodeError:
        raise BadPath(f"{what} {path} is not a UTF-8 text file (is it a binary file?)") from None
    if not text.strip():
        raise BadPath(f"{what} {path} is empty")
    return text


def check_writable_dir(path: Path, what: str) -> None:
    """`path` is a directory we may create or write into (checked before anything is written)."""
    if path.exists() and not path.is_dir():
        raise BadPath(f"{what} {path} is a file, not a directory: choose another")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise BadPath(f"{what} {path} cannot be made: {existing} is a file")
    try:  # the real test (root passes every access() check, but not a read-only mount); leaves nothing behind
        handle, probe = tempfile.mkstemp(dir=existing, prefix=".spade-write-check-")
    except OSError as exc:
        raise BadPath(f"{what} {path} cannot be written ({existing}: {exc.strerror or exc}): choose another") from None
    os.close(handle)
    os.unlink(probe)


def address_problem(name: str, address: str) -> str | None:
    """Why `address` is not a ZeroMQ address we can bind or connect (tcp://HOST:PORT or ipc://PATH), or None
    (empty: the run's default)."""
    if not address:
        return None
    if address.startswith("ipc://") and len(address) > len("ipc://"):
        return None
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    if address.startswith("tcp://") and host and port.isdigit() and 0 < int(port) < 65536:
        return None
    return f"{name} = {address!r} is not an address: use tcp://HOST:PORT (e.g. tcp://0.0.0.0:5555) or ipc://PATH, or leave it empty"


def connect_address(bound: str) -> str:
    """The address to connect to on this host for a bind address (a wildcard host becomes 127.0.0.1)."""
    return bound.replace("0.0.0.0", "127.0.0.1").replace("*", "127.0.0.1")


# A learner checkpoint folder's own files beside the model (learner/checkpoint.py writes them).
CHECKPOINT_SUMMARY = "checkpoint.json"  # {"step", "version", "lora"}: what the engine and the workers read without torch
CHECKPOINT_STATE = "trainer_state.pt"  # the resume state: optimizer, scheduler, RNG


def read_checkpoint_version(folder: Path) -> int | None:
    """The policy version of the checkpoint in `folder`, or None for a folder without a readable summary."""
    try:
        return int(json.loads((folder / CHECKPOINT_SUMMARY).read_text())["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class RunPaths:
    def __init__(self, run_dir: str | Path):
        self.root = Path(run_dir).resolve()
        self.config = self.root / "config.toml"
        self.store = self.root / "store"
        self.metrics = self.root / "metrics.jsonl"
        self.logs = self.root / "logs"
        self.policy = self.root / "policy"
        self.checkpoints = self.root / "checkpoints"
        self.meta = self.root / "run.json"
        self.report = self.root / "report.html"
        self.keys = self.root / "keys"

    @property
    def socket_dir(self) -> Path:
        """The owner-only folder of the run's ipc sockets: ipc paths are limited to ~107 bytes, so it is in /tmp,
        named by the user and a hash of the run directory (the engine makes it 0700 and checks it: ensure_private_dir)."""
        digest = hashlib.sha1(str(self.root).encode()).hexdigest()[:12]
        return Path(f"/tmp/spade-{os.getuid()}-{digest}")

    def _ipc(self, name: str) -> str:
        return f"ipc://{self.socket_dir}/{name}.sock"

    @property
    def worker_address(self) -> str:
        return self._ipc("workers")

    @property
    def learner_address(self) -> str:
        return self._ipc("learner")

    @property
    def ipc_files(self) -> list[Path]:
        """The socket files of the run's ipc addresses (removed by the engine when it closes its sockets)."""
        return [Path(a.removeprefix("ipc://")) for a in (self.worker_address, self.learner_address)]

    def policy_version_dir(self, version: int) -> Path:
        return self.policy / f"v{version:06d}"

    def read_meta(self) -> RunMeta:
        """run.json (engine/protocol/run_meta.py); an empty RunMeta before `up` wrote one."""
        return read_run_meta(self.meta)

    def update_meta(self, **values) -> None:
        update_run_meta(self.meta, **values)

    @contextlib.contextmanager
    def engine_lock(self) -> Iterator[None]:
        """Held while an engine runs on this directory: a second engine (say, `up --resume` of a running run)
        is refused instead of stealing the first one's sockets."""
        self.root.mkdir(parents=True, exist_ok=True)
        handle = open(self.root / "engine.lock", "a+")  # noqa: SIM115 (held for the life of the context)
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "?"
                raise RunInUse(
                    f"run directory {self.root} is in use by a running engine (pid {holder}): stop it first, "
                    f"or add a worker to it with `bin/spade-engine worker --run-dir {self.root}`"
                ) from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            yield
        finally:
            handle.close()

    def read_model_path(self) -> str:
        return require_model_path(self.meta)

    def checkpoint_version(self) -> int | None:
        """The policy version of the learner's newest checkpoint, or None without one."""
        return read_checkpoint_version(self.checkpoints / "latest")


def ensure_private_dir(folder: Path, what: str) -> None:
    """`folder` exists, is a real folder (no symlink) owned by this user, and only this user may enter it (0700):
    made so when missing; anything else is refused (another user's folder, a loosened mode), naming the fix."""
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise BadPath(f"{what} {folder} cannot be made ({exc.strerror or exc})") from None
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise BadPath(f"{what} {folder} is not a folder (a link or a file is in its place): remove it and start again")
    if info.st_uid != os.getuid():
        raise BadPath(f"{what} {folder} belongs to another user (uid {info.st_uid}): someone may be listening in; remove it, or run elsewhere")
    if info.st_mode & 0o077:
        raise BadPath(f"{what} {folder} is open to other users (mode {stat.S_IMODE(info.st_mode):o}): chmod 700 it, or remove it")
