"""Where a run keeps its files, and the addresses of its sockets.

    run_dir/config.toml        the resolved config          run_dir/store/          LMDB
    run_dir/metrics.jsonl      one line per step            run_dir/logs/           one log per process
    run_dir/policy/vNNNNNN/    published policy versions    run_dir/checkpoints/    learner checkpoints
    run_dir/run.json           model path, isolation, start time, process ids
    run_dir/engine.lock        held (flock) by the engine while it runs; the kernel drops it when the engine dies
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path


class RunInUse(RuntimeError):
    """Another engine holds the run directory."""


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

    def _ipc(self, name: str) -> str:
        # ipc paths are limited to ~107 bytes, so the socket lives in /tmp under a hash of the run directory.
        digest = hashlib.sha1(str(self.root).encode()).hexdigest()[:12]
        return f"ipc:///tmp/spade-{digest}-{name}.sock"

    @property
    def worker_address(self) -> str:
        return self._ipc("workers")

    @property
    def learner_address(self) -> str:
        return self._ipc("learner")

    def policy_version_dir(self, version: int) -> Path:
        return self.policy / f"v{version:06d}"

    def read_meta(self) -> dict:
        return json.loads(self.meta.read_text()) if self.meta.exists() else {}

    def update_meta(self, **values) -> None:
        meta = self.read_meta()
        meta.update(values)
        tmp = self.meta.with_suffix(".tmp")
        tmp.write_text(json.dumps(meta, indent=2, sort_keys=True))
        tmp.replace(self.meta)

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
        return self.read_meta()["model_path"]
