"""Where a run keeps its files, and the addresses of its sockets.

    run_dir/config.toml        the resolved config          run_dir/store/          LMDB
    run_dir/metrics.jsonl      one line per step            run_dir/logs/           one log per process
    run_dir/policy/vNNNNNN/    published policy versions    run_dir/checkpoints/    learner checkpoints
    run_dir/run.json           model path, isolation, start time, process ids
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


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

    def read_model_path(self) -> str:
        return self.read_meta()["model_path"]
