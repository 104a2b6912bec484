"""The run's LMDB store: named databases, typed records, batched writes.

    store = Store.open(run_dir / "store")          # the engine is the only writer
    with store.batch() as batch:                     # one transaction, committed on exit
        batch.put_environment(record)
    for record in store.trajectories(): ...          # readers use their own read transactions

Databases: `environments` (env_id), `trajectories` (step/sample_id), `memory` (env_id), `designer_rewards`
(env_id), `batches` (what each learner update trained on), `meta` (the run state). A crash loses at most the batch in flight; everything committed stays readable
(`Store.open(path, readonly=True)` works while the engine runs, and on a read-only copy of a finished run).

What can go wrong is one line, never a traceback or a signal:
    StoreMissing      (InputError)  a read-only open of a folder without `data.mdb`
    StoreCorrupt      (InputError)  `data.mdb` is empty, truncated or scrambled (checked before LMDB maps it)
    StoreAccessError  (InputError)  the folder or its files cannot be opened (permissions), or is in use
    StoredRecordError (InputError)  a record does not decode (storage/records.py)
    StoreFullError    (RunFailed)   the disk (or the map) is full: nothing of the failed batch was written
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import lmdb
import msgspec

from storage.errors import FIX as _FIX
from storage.errors import StoreAccessError, StoreCorrupt, StoreFullError, StoreMissing
from storage.integrity import check_data_file, check_snapshot, header_or_raise, reading
from storage.records import (
    BatchRecord,
    DesignerRewardRecord,
    EnvironmentRecord,
    MemoryRecord,
    RunState,
    StoredRecordError,
    TrajectoryRecord,
)

__all__ = ["Store", "StoreAccessError", "StoreCorrupt", "StoreFullError", "StoreMissing", "check_data_file", "trajectory_key", "trajectory_prefix"]

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
# LMDB errors that mean the file's pages are not what LMDB wrote (or were written by an incompatible LMDB).
_DAMAGE = (
    lmdb.CorruptedError,
    lmdb.PageNotFoundError,
    lmdb.InvalidError,
    lmdb.VersionMismatchError,
    lmdb.IncompatibleError,
    lmdb.CursorFullError,  # a b-tree deeper than LMDB's cursor stack: a page loop
)


class Batch:
    """Writes inside one LMDB write transaction."""

    def __init__(self, txn: lmdb.Transaction, dbs: dict[str, Any]):
        self._txn = txn
        self._dbs = dbs
        self.count = 0
        self.nbytes = 0  # keys and values written: what the commit needs on disk, pages aside

    def _put(self, db: str, key: str, record: Any) -> None:
        key_bytes, value = key.encode(), _ENCODER.encode(record)
        self._txn.put(key_bytes, value, db=self._dbs[db])
        self.count += 1
        self.nbytes += len(key_bytes) + len(value)

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


def trajectory_prefix(step: int) -> str:
    """The start of every trajectory key of `step`: zero-padded, so key order is step order."""
    return f"{step:08d}/"


def trajectory_key(step: int, sample_id: str) -> str:
    return trajectory_prefix(step) + sample_id


class Store:
    def __init__(self, env: lmdb.Environment, path: Path):
        self._env = env
        self.path = path
        self.data_file = path / "data.mdb"
        self._dbs = {name: env.open_db(name.encode(), create=not env.flags()["readonly"]) for name in DATABASES}

    @classmethod
    def open(cls, path: str | Path, *, readonly: bool = False) -> Store:
        path = Path(path)
        data = path / "data.mdb"
        if readonly and not data.exists():
            raise StoreMissing(f"no LMDB store at {path} (expected {data}): give the store folder of a run (RUN_DIR/store)")
        existed = data.exists()
        if existed:  # the meta pages and the size, before LMDB maps the file (the map then stays within it)
            with reading(data) as fd:
                header_or_raise(data, fd)
        try:
            if not readonly:
                path.mkdir(parents=True, exist_ok=True)
            env = _open_env(path, readonly)
            try:
                if existed:  # the b-trees, before LMDB reads a page of them (opening the named databases does)
                    check_snapshot(env, data)
                return cls(env, path)
            except BaseException:
                env.close()  # lmdb refuses a second open of an environment this process still holds
                raise
        except _DAMAGE as exc:
            raise StoreCorrupt(f"the LMDB store file {data} is damaged (opening it: {exc}): {_FIX}") from exc
        except lmdb.Error as exc:
            if isinstance(getattr(exc, "code", None), int) and exc.code > 0:  # an errno: permissions, not a folder, ...
                raise _access_error(path, readonly, os.strerror(exc.code)) from exc
            raise
        except OSError as exc:
            raise _access_error(path, readonly, exc.strerror or str(exc)) from exc

    def close(self) -> None:
        self._env.close()

    @contextlib.contextmanager
    def batch(self) -> Iterator[Batch]:
        """One write transaction: all of it is committed on exit, or none of it (on an error)."""
        batch = None
        try:
            with self._env.begin(write=True) as txn:
                batch = Batch(txn, self._dbs)
                yield batch
        except _DAMAGE as exc:
            raise StoreCorrupt(f"the LMDB store file {self.data_file} is damaged (writing to it: {exc}): {_FIX}") from exc
        except lmdb.Error as exc:
            if not self._disk_full(exc, batch):
                raise
            raise self._full(exc) from exc

    def _disk_full(self, exc: lmdb.Error, batch: Batch | None) -> bool:
        """Whether a failed put or commit ran out of room. The errno does not say so reliably: a write that finds no
        room at all is ENOSPC (EDQUOT over a quota, EFBIG past a file size limit), but a write that fills the disk
        part way is a short write, which LMDB 0.9 reports as EIO ("short write, filesystem full?" in mdb.c), and so
        is an fsync that fails on NFS, FUSE or a thin-provisioned disk. A full tmpfs and a full ext4 loop mount both
        give EIO here. So for an EIO or any other OS error, look at the free space: below what the failed write
        needed (its records plus a margin of pages for the b-tree), the disk is full."""
        if isinstance(exc, (lmdb.MapFullError, lmdb.DiskError)):
            return True
        code = getattr(exc, "code", 0)
        if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return True
        if not isinstance(code, int) or code <= 0:  # an LMDB code (MDB_...), not an errno from the filesystem
            return False
        free = _free_bytes(self.path)
        if free is None:
            return False
        page = self._env.stat()["psize"]
        return free < (batch.nbytes if batch else 0) + 64 * page

    def _full(self, exc: BaseException) -> StoreFullError:
        free = _free_bytes(self.path)
        if free is None:
            room = "unknown space"
        else:
            room = f"{free / 2**30:.1f} GiB" if free >= 2**30 else f"{free / 2**20:.1f} MiB"
        return StoreFullError(
            f"{'the store map is full' if isinstance(exc, lmdb.MapFullError) else 'the disk is full'}: the LMDB store at "
            f"{self.path} cannot grow ({room} free; {type(exc).__name__}: {exc}): "
            f"free disk space, then continue with `bin/spade-engine up --resume {self.path.parent}`; everything committed before is kept"
        )

    # ------------------------------------------------------------ reads
    def _damaged(self, where: str, exc: lmdb.Error) -> StoreCorrupt:
        return StoreCorrupt(f"the LMDB store file {self.data_file} is damaged ({where}: {exc}): {_FIX}")

    def _decode(self, db: str, key: bytes, value: bytes) -> Any:
        try:
            return _DECODERS[db].decode(value)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise StoredRecordError(
                f"record {key.decode(errors='replace')!r} in database {db!r} is corrupt: {exc} "
                f"(in {self.data_file}: restore the store from a backup or start a new run)"
            ) from None

    def _get(self, db: str, key: str) -> Any | None:
        try:
            with self._env.begin() as txn:
                value = txn.get(key.encode(), db=self._dbs[db])
        except _DAMAGE as exc:
            raise self._damaged(f"reading key {key!r} of database {db!r}", exc) from exc
        return None if value is None else self._decode(db, key.encode(), value)

    def _scan(self, db: str, prefix: str = "", skipped: list[StoredRecordError] | None = None) -> Iterator[Any]:
        """The records of `db` whose keys start with `prefix`, in key order. A record that does not decode raises
        StoredRecordError, or, given a `skipped` list, is appended to it and the scan goes on (storage/scan.py)."""
        last = None
        try:
            with self._env.begin() as txn:
                cursor = txn.cursor(db=self._dbs[db])
                start = prefix.encode()
                if not cursor.set_range(start):
                    return
                for key, value in cursor:
                    if not key.startswith(start):
                        break
                    last = key
                    try:
                        record = self._decode(db, key, value)
                    except StoredRecordError as exc:
                        if skipped is None:
                            raise
                        skipped.append(exc)
                        continue
                    yield record
        except _DAMAGE as exc:
            where = "at its first key" if last is None else f"after key {last.decode(errors='replace')!r}"
            raise self._damaged(f"reading database {db!r} {where}", exc) from exc

    def environment(self, env_id: str) -> EnvironmentRecord | None:
        return self._get("environments", env_id)

    def environments(self) -> Iterator[EnvironmentRecord]:
        return self._scan("environments")

    def trajectories(self, step: int | None = None) -> Iterator[TrajectoryRecord]:
        return self._scan("trajectories", "" if step is None else trajectory_prefix(step))

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
        try:
            with self._env.begin() as txn:
                return {name: txn.stat(db)["entries"] for name, db in self._dbs.items()}
        except _DAMAGE as exc:
            raise self._damaged("counting records", exc) from exc


def _free_bytes(path: Path) -> int | None:
    """Bytes this process may still write on the filesystem under `path` (root may also use the blocks ext4
    reserves for it), or None if that cannot be read."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize


def _access_error(path: Path, readonly: bool, reason: str) -> StoreAccessError:
    if readonly:
        return StoreAccessError(f"cannot open the LMDB store at {path} for reading ({reason}): give this user read access to it")
    return StoreAccessError(
        f"cannot open the LMDB store at {path} for writing ({reason}): give this user write access to it, "
        "or copy the run to a writable place"
    )


# ---------------------------------------------------------------- opening
def _open_env(path: Path, readonly: bool) -> lmdb.Environment:
    kwargs: dict[str, Any] = {"map_size": MAP_SIZE, "max_dbs": len(DATABASES) + 1, "readonly": readonly, "subdir": True}
    # The store never uses writemap: LMDB writes with pwrite(), so a full disk is an error code from a write or an
    # fsync, not a SIGBUS on a store to the map (writemap on a sparse file that cannot get blocks does that).
    if not readonly:
        return lmdb.open(str(path), lock=True, **kwargs)
    # A reader normally uses the lock file (lock.mdb): it takes a slot in the reader table there, so the live writer
    # (the engine) never reuses the pages of the snapshot it reads, and neither blocks the other. But opening
    # lock.mdb needs write access to it (or to the folder, to create it): a finished run in an archive, on a shared
    # folder of another user or under a read-only mount cannot give that. Without a lock file LMDB still reads
    # correctly as long as nobody writes, which holds for such a run; so fall back to lock=False, once we know that no
    # process has the environment open (LMDB holds an fcntl lock on lock.mdb while it does). LMDB itself already
    # goes on without the lock file on a read-only filesystem (EROFS): that case gets the same in-use check.
    try:
        read_only_fs = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        read_only_fs = False
    if read_only_fs:
        _refuse_if_in_use(path)
    try:
        return lmdb.open(str(path), lock=True, **kwargs)
    except lmdb.Error as exc:
        if not (isinstance(exc, lmdb.ReadonlyError) or getattr(exc, "code", 0) in (errno.EACCES, errno.EPERM, errno.EROFS)):
            raise
    _refuse_if_in_use(path)
    return lmdb.open(str(path), lock=False, **kwargs)


def _refuse_if_in_use(path: Path) -> None:
    """Refuse a lock-less read of an environment another process has open: its writer could reuse the pages we
    read. Every process with an LMDB environment open holds a shared fcntl lock on the first byte of lock.mdb,
    which F_GETLK sees from a read-only descriptor."""
    pid = _lock_holder(path / "lock.mdb")
    if pid is not None:
        raise StoreAccessError(
            f"the LMDB store at {path} is open in another process (pid {pid}), and this user cannot write its lock file "
            f"{path / 'lock.mdb'} that a reader beside a live writer needs: read it when that process has finished, "
            "or as a user who can write the store folder"
        )


def _lock_holder(lock_file: Path) -> int | None:
    if sys.platform != "linux":  # struct flock below is Linux's (64-bit off_t); elsewhere the check is skipped
        return None
    try:
        fd = os.open(lock_file, os.O_RDONLY)
    except OSError:
        return None  # no lock file (nobody ever opened it with a lock here) or unreadable: nothing to learn
    try:
        query = struct.pack("@hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0) + bytes(8)  # struct flock
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return None
    finally:
        os.close(fd)
    kind, _, _, _, pid = struct.unpack_from("@hhqqi", answer)
    return None if kind == fcntl.F_UNLCK else pid
