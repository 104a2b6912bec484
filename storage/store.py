"""The run's LMDB store: named databases, typed records, batched writes.

    store = Store.open(run_dir / "store")          # the engine is the only writer
    with store.batch() as batch:                     # one transaction, committed on exit
        batch.put_environment(record)
    for record in store.trajectories(): ...          # readers use their own read transactions

Databases: `environments` (env_id), `trajectories` (step/sample_id), `memory` (env_id), `designer_rewards`
(env_id), `batches` (what each learner update trained on), `meta` (the run state). A crash loses at most the batch in flight; everything committed stays readable
(`Store.open(path, readonly=True)` works while the engine runs).
"""

from __future__ import annotations

import contextlib
import errno
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import lmdb
import msgspec

from storage.records import (
    BatchRecord,
    DesignerRewardRecord,
    EnvironmentRecord,
    MemoryRecord,
    RunState,
    StoredRecordError,
    TrajectoryRecord,
)

T = TypeVar("T")

MAP_SIZE = 1 << 40  # 1 TiB of address space: the file grows only as records are written; a paper-scale run
# (hundreds of steps of 576 long multi-turn trajectories) stores tens of GB
DATABASES = {
    "environments": EnvironmentRecord,
    "trajectories": TrajectoryRecord,
    "memory": MemoryRecord,
    "designer_rewards": DesignerRewardRecord,
    "batches": BatchRecord,
    "meta": RunState,
}
_ENCODER = msgspec.msgpack.Encoder()
_DECODERS = {name: msgspec.msgpack.Decoder(kind) for name, kind in DATABASES.items()}


class StoreFullError(Exception):
    """The disk under the store (or its map) is full; nothing of the failed transaction was written."""


class Batch:
    """Writes inside one LMDB write transaction."""

    def __init__(self, txn: lmdb.Transaction, dbs: dict[str, Any]):
        self._txn = txn
        self._dbs = dbs
        self.count = 0

    def _put(self, db: str, key: str, record: Any) -> None:
        self._txn.put(key.encode(), _ENCODER.encode(record), db=self._dbs[db])
        self.count += 1

    def put_environment(self, record: EnvironmentRecord) -> None:
        self._put("environments", record.env_id, record)

    def put_trajectory(self, record: TrajectoryRecord) -> None:
        self._put("trajectories", trajectory_key(record.step, record.sample_id), record)

    def put_memory(self, record: MemoryRecord) -> None:
        self._put("memory", record.env_id, record)

    def delete_memory(self, env_id: str) -> None:
        self._txn.delete(env_id.encode(), db=self._dbs["memory"])

    def put_designer_reward(self, record: DesignerRewardRecord) -> None:
        self._put("designer_rewards", record.env_id, record)

    def put_batch(self, record: BatchRecord) -> None:
        self._put("batches", f"{record.version:08d}", record)

    def put_state(self, state: RunState) -> None:
        self._put("meta", "state", state)


def trajectory_key(step: int, sample_id: str) -> str:
    return f"{step:08d}/{sample_id}"


class Store:
    def __init__(self, env: lmdb.Environment, path: Path):
        self._env = env
        self.path = path
        self._dbs = {name: env.open_db(name.encode(), create=not env.flags()["readonly"]) for name in DATABASES}

    @classmethod
    def open(cls, path: str | Path, *, readonly: bool = False) -> Store:
        path = Path(path)
        if readonly and not (path / "data.mdb").exists():
            raise FileNotFoundError(f"no LMDB store at {path} (expected {path / 'data.mdb'})")
        path.mkdir(parents=True, exist_ok=True)
        env = lmdb.open(
            str(path), map_size=MAP_SIZE, max_dbs=len(DATABASES) + 1, readonly=readonly, lock=True, subdir=True
        )
        return cls(env, path)

    def close(self) -> None:
        self._env.close()

    @contextlib.contextmanager
    def batch(self) -> Iterator[Batch]:
        """One write transaction: all of it is committed on exit, or none of it (on an error)."""
        try:
            with self._env.begin(write=True) as txn:
                yield Batch(txn, self._dbs)
        except (lmdb.MapFullError, lmdb.DiskError) as exc:
            raise self._full(exc) from exc
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            raise self._full(exc) from exc

    def _full(self, exc: BaseException) -> StoreFullError:
        free = shutil.disk_usage(self.path).free
        return StoreFullError(
            f"the LMDB store at {self.path} cannot grow ({type(exc).__name__}: {exc}; {free / 2**30:.1f} GiB free on its disk): "
            "free disk space, then continue with `bin/spade-engine up --resume RUN_DIR`; everything committed before is kept"
        )

    # ------------------------------------------------------------ reads
    def _decode(self, db: str, key: bytes, value: bytes) -> Any:
        try:
            return _DECODERS[db].decode(value)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise StoredRecordError(f"record {key.decode(errors='replace')!r} in database {db!r} is corrupt: {exc}") from None

    def _get(self, db: str, key: str) -> Any | None:
        with self._env.begin() as txn:
            value = txn.get(key.encode(), db=self._dbs[db])
            return None if value is None else self._decode(db, key.encode(), value)

    def _scan(self, db: str, prefix: str = "") -> Iterator[Any]:
        with self._env.begin() as txn:
            cursor = txn.cursor(db=self._dbs[db])
            start = prefix.encode()
            if not cursor.set_range(start):
                return
            for key, value in cursor:
                if not key.startswith(start):
                    break
                yield self._decode(db, key, value)

    def environment(self, env_id: str) -> EnvironmentRecord | None:
        return self._get("environments", env_id)

    def environments(self) -> Iterator[EnvironmentRecord]:
        return self._scan("environments")

    def trajectories(self, step: int | None = None) -> Iterator[TrajectoryRecord]:
        return self._scan("trajectories", "" if step is None else f"{step:08d}/")

    def memory(self) -> Iterator[MemoryRecord]:
        return self._scan("memory")

    def designer_rewards(self) -> Iterator[DesignerRewardRecord]:
        return self._scan("designer_rewards")

    def batches(self) -> Iterator[BatchRecord]:
        return self._scan("batches")

    def trajectory(self, key: str) -> TrajectoryRecord | None:
        return self._get("trajectories", key)

    def state(self) -> RunState:
        return self._get("meta", "state") or RunState()

    def counts(self) -> dict[str, int]:
        with self._env.begin() as txn:
            return {name: txn.stat(db)["entries"] for name, db in self._dbs.items()}
