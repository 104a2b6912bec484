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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import lmdb
import msgspec

from engine.errors import InputError, RunFailed
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
_FIX = "restore it from a backup or start a new run"


class StoreFullError(RunFailed):
    """The disk under the store (or its map) is full; nothing of the failed transaction was written."""


class StoreCorrupt(InputError):
    """The store's data file is damaged: empty, truncated, scrambled header or b-tree pages."""


class StoreMissing(InputError, FileNotFoundError):
    """A read-only open of a folder that holds no store."""


class StoreAccessError(InputError):
    """The store's folder or files cannot be opened by this user, or cannot be read safely right now."""


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


def trajectory_key(step: int, sample_id: str) -> str:
    return f"{step:08d}/{sample_id}"


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
            with _reading(data) as fd:
                _header_or_raise(data, fd)
        try:
            if not readonly:
                path.mkdir(parents=True, exist_ok=True)
            env = _open_env(path, readonly)
            try:
                if existed:  # the b-trees, before LMDB reads a page of them (opening the named databases does)
                    _check_snapshot(env, data)
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

    def _scan(self, db: str, prefix: str = "") -> Iterator[Any]:
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
                    yield self._decode(db, key, value)
        except _DAMAGE as exc:
            where = "at its first key" if last is None else f"after key {last.decode(errors='replace')!r}"
            raise self._damaged(f"reading database {db!r} {where}", exc) from exc

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


# ---------------------------------------------------------------- the file check
# LMDB maps data.mdb and trusts what it finds there: a page beyond the end of a truncated file is a SIGBUS when
# touched (the process dies with status 135 and prints nothing), a scrambled header an lmdb traceback, a scrambled
# b-tree page an assertion (SIGABRT) or a wild read. So Store.open reads the file with plain reads and checks
# LMDB's on-disk format (lmdb's mdb.c; 64-bit builds, the host's byte order): the meta pages before LMDB maps the
# file, the b-trees after, in the snapshot of a read transaction and before LMDB reads any page of them:
#
#   page 0 and page 1 are meta pages: a page header (16 bytes in LMDB 0.9: mp_pgno u64, mp_pad u16, mp_flags u16
#   with P_META, mp_lower u16, mp_upper u16; 24 in LMDB 1.0, which adds mp_txnid) then MDB_meta: mm_magic u32
#   (0xBEEFC0DE), mm_version u32 (data version: 1 for 0.9, 3 for 1.0), mm_address, mm_mapsize, mm_dbs[2] (the free
#   and the main database, 48 bytes each: md_pad u32 (the page size, in the free DB's record), md_flags u16,
#   md_depth u16, md_branch_pages, md_leaf_pages, md_overflow_pages, md_entries, md_root), mm_last_pg, mm_txnid.
#   LMDB reads both and uses the one with the larger txnid; a file is at least two pages; pages 0 .. mm_last_pg
#   are allocated.
#
# Then the b-trees are walked from the roots of the snapshot's meta page (branch and leaf pages; overflow pages are
# only bounds-checked, not read): every page a reader or the writer can touch must lie inside the file, store its own
# page number and be a page of the kind its parent says, and every node must lie inside its page. The file may end
# before page mm_last_pg where the pages past its end are free (nothing reads a free page; the writer writes one
# before it uses it), so "truncated" means: a page in use lies past the end. The walk reads the branch and leaf
# pages only (a fraction of a percent of a store of trajectories, whose records live in overflow pages): 0.14 s for
# 100 000 trajectories in 2.9 GB.
_MAGIC = 0xBEEFC0DE
_P_BRANCH, _P_LEAF, _P_OVERFLOW, _P_META, _P_LEAF2 = 0x01, 0x02, 0x04, 0x08, 0x20
_F_BIGDATA, _F_SUBDATA, _F_DUPDATA = 0x01, 0x02, 0x04  # node flags
_MDB_DUPSORT = 0x04  # md_flags
_NO_PAGE = (1 << 64) - 1  # md_root of an empty database
_MAX_DEPTH = 32  # LMDB's cursor stack
_DB = struct.Struct("=IHHQQQQQ")  # MDB_db: pad, flags, depth, branch, leaf, overflow pages, entries, root
_META = struct.Struct("=IIQQ48s48sQQ")  # MDB_meta: magic, version, address, mapsize, free db, main db, last_pg, txnid
_NODE = struct.Struct("=HHHH")  # MDB_node: mn_lo, mn_hi, mn_flags, mn_ksize (then the key, then the data)
# page-header size -> (data version, PAGEBASE, largest page size), as LMDB 0.9 and 1.0 lay pages out
_LAYOUTS = {16: (1, 0, 0x8000), 24: (3, 24, 0x10000)}


class _Damage(Exception):
    """What is wrong with the file, in a few words."""


@dataclass(frozen=True)
class _Meta:
    slot: int
    psize: int
    free: tuple  # _DB fields of the free database
    main: tuple  # _DB fields of the main database
    last_pg: int
    txnid: int


@dataclass(frozen=True)
class _Header:
    size: int  # bytes in the file, read after the meta pages (the file only grows while a writer runs)
    hdrsz: int
    psize: int
    meta: _Meta  # the newest meta page


def check_data_file(data: Path) -> None:
    """Raise StoreCorrupt (one line naming the file and the fix) if `data` (an LMDB data.mdb) is empty, truncated
    or has damaged meta or b-tree pages; StoreAccessError if it cannot be read. Reads only, never maps. For a file
    nobody writes meanwhile: Store.open checks a live store's snapshot while it holds a read transaction."""
    with _reading(data) as fd:
        _walk_or_raise(data, fd, _header_or_raise(data, fd))


@contextlib.contextmanager
def _reading(data: Path) -> Iterator[int]:
    try:
        with open(data, "rb") as f:
            yield f.fileno()
    except OSError as exc:
        raise StoreAccessError(f"cannot read the LMDB store file {data} ({exc.strerror or exc}): give this user read access to it") from exc


def _header_or_raise(data: Path, fd: int, txnid: int | None = None) -> _Header | None:
    try:
        return _read_header(fd, txnid)
    except _Damage as exc:
        raise StoreCorrupt(f"the LMDB store file {data} is damaged ({exc}): {_FIX}") from None


def _walk_or_raise(data: Path, fd: int, header: _Header | None) -> None:
    try:
        if header is not None:
            _walk(fd, header)
    except _Damage as exc:
        raise StoreCorrupt(f"the LMDB store file {data} is damaged ({exc}): {_FIX}") from None


def _check_snapshot(env: lmdb.Environment, data: Path) -> None:
    """Walk the b-trees of the snapshot a read transaction of `env` holds. The transaction takes a slot in the
    reader table, so a live writer does not reuse the snapshot's pages while we read them (an unpinned walk beside
    a writer reads pages it has since rewritten: false damage). Its meta page stays only until the writer's
    second commit after it: read it twice right after the transaction began, and begin again if it has changed."""
    with _reading(data) as fd:
        for _attempt in range(100):
            with env.begin() as txn:
                header = _header_or_raise(data, fd, txn.id())
                again = header and _header_or_raise(data, fd, txn.id())
                if header is not None and again is not None and header.meta == again.meta:
                    _walk_or_raise(data, fd, header)
                    return
        # A writer that commits faster than two reads of a page, a hundred times in a row: leave the b-trees
        # unchecked rather than fail (the header is checked).


def _expected_layout() -> int:
    """The page-header size of the LMDB this lmdb module runs (0.9: 16, 1.0: 24)."""
    return 16 if lmdb.version()[0] == 0 else 24


def _parse_meta(buf: bytes, slot: int, hdrsz: int) -> _Meta:
    what = f"meta page {slot} (the header)"
    if len(buf) < hdrsz + _META.size:
        raise _Damage(f"{what} is cut short")
    (mp_pgno,) = struct.unpack_from("=Q", buf, 0)
    (flags,) = struct.unpack_from("=H", buf, hdrsz - 6)
    magic, version, _address, _mapsize, free, main, last_pg, txnid = _META.unpack_from(buf, hdrsz)
    data_version, _, max_psize = _LAYOUTS[hdrsz]
    if magic != _MAGIC:
        raise _Damage(f"{what} is scrambled: no LMDB magic number")
    if not flags & _P_META or mp_pgno != slot:
        raise _Damage(f"{what} is scrambled: its page header is not a meta page's")
    if version != data_version:
        raise _Damage(f"{what} gives data version {version}, LMDB {lmdb.version()[0]}.{lmdb.version()[1]} writes {data_version}")
    free_db, main_db = _DB.unpack(free), _DB.unpack(main)
    psize = free_db[0]
    if psize & (psize - 1) or not max(256, hdrsz + _META.size) <= psize <= max_psize:
        raise _Damage(f"{what} is scrambled: page size {psize}")
    return _Meta(slot=slot, psize=psize, free=free_db, main=main_db, last_pg=last_pg, txnid=txnid)


def _read_metas(fd: int) -> tuple[int, _Meta, _Meta]:
    head = os.pread(fd, 4096, 0)
    if not head:
        raise _Damage("empty: 0 bytes")
    layouts = [h for h in _LAYOUTS if len(head) >= h + 4 and struct.unpack_from("=I", head, h)[0] == _MAGIC]
    if not layouts:
        if len(head) < 16 + _META.size:
            raise _Damage(f"truncated: {len(head)} bytes, too short for LMDB's header")
        raise _Damage("meta page 0 (the header) is scrambled: no LMDB magic number; not an LMDB file")
    hdrsz = layouts[0]
    if len(head) < hdrsz + _META.size:
        raise _Damage(f"truncated: {len(head)} bytes, too short for LMDB's header")
    if hdrsz != _expected_layout():
        raise _Damage(f"written by an LMDB of another major version (page header of {hdrsz} bytes), lmdb {'.'.join(map(str, lmdb.version()))} cannot read it")
    meta0 = _parse_meta(head, 0, hdrsz)
    page1 = os.pread(fd, hdrsz + _META.size, meta0.psize)
    if len(page1) < hdrsz + _META.size:
        size = os.fstat(fd).st_size
        raise _Damage(f"truncated: {size} bytes, shorter than its two meta pages ({2 * meta0.psize} bytes)")
    meta1 = _parse_meta(page1, 1, hdrsz)
    if meta1.psize != meta0.psize:
        raise _Damage(f"the meta pages disagree on the page size ({meta0.psize} and {meta1.psize})")
    return hdrsz, meta0, meta1


def _read_header(fd: int, txnid: int | None = None) -> _Header | None:
    """The file's header with the newest meta page, or with the one of snapshot `txnid` (None once the writer
    has overwritten that meta page)."""
    hdrsz, meta0, meta1 = _read_metas(fd)
    size = os.fstat(fd).st_size  # after the meta pages: a live writer writes its pages before the meta page
    psize = meta0.psize
    if size < 2 * psize:
        raise _Damage(f"truncated: {size} bytes, shorter than its two meta pages ({2 * psize} bytes)")
    if txnid is None:
        meta = meta1 if meta0.txnid < meta1.txnid else meta0  # as mdb_env_pick_meta
    else:
        meta = next((m for m in (meta0, meta1) if m.txnid == txnid), None)
        if meta is None:
            return None
    if meta.last_pg < 1:
        raise _Damage(f"meta page {meta.slot} (the header) is scrambled: last page {meta.last_pg}")
    return _Header(size=size, hdrsz=hdrsz, psize=psize, meta=meta)


def _walk(fd: int, header: _Header) -> None:
    """Check every branch and leaf page reachable from the newest meta page (the free-page list, the main database
    and the named databases it lists); raise _Damage naming the first bad page."""
    psize, size, hdrsz, meta = header.psize, header.size, header.hdrsz, header.meta
    pagebase = _LAYOUTS[hdrsz][1]
    next_pgno = meta.last_pg + 1  # pages 0 .. mm_last_pg are in use
    in_use = f"its header says {next_pgno * psize} bytes are in use"
    seen: set[int] = set()
    todo: list[tuple[int, int, str, int]] = []  # (page, depth: 1 = leaf, database, its md_flags)

    def tree(name: str, db: tuple) -> None:
        _pad, flags, depth, _branch, _leaf, _overflow, _entries, root = db
        if root == _NO_PAGE:
            return  # an empty database
        if not 1 <= depth <= _MAX_DEPTH:
            raise _Damage(f"the record of {name} is scrambled: depth {depth}")
        todo.append((root, depth, name, flags))

    def page_range(name: str, first: int, count: int) -> None:
        if first < 2 or first + count > next_pgno:
            raise _Damage(f"{name} refers to page {first + count - 1}, beyond the {next_pgno} pages in use (scrambled)")
        if (first + count) * psize > size:
            raise _Damage(f"truncated: {size} bytes, but {name} uses page {first + count - 1} (bytes up to {(first + count) * psize}); {in_use}")

    tree("the free-page list", meta.free)
    tree("the main database", meta.main)
    while todo:
        pgno, depth, name, db_flags = todo.pop()
        page_range(name, pgno, 1)
        if pgno in seen:
            raise _Damage(f"page {pgno} of {name} is reached twice (scrambled b-tree)")
        seen.add(pgno)
        page = os.pread(fd, psize, pgno * psize)
        if len(page) < psize:
            raise _Damage(f"truncated: page {pgno} of {name} is cut short")
        (mp_pgno,) = struct.unpack_from("=Q", page, 0)
        flags, lower, upper = struct.unpack_from("=HHH", page, hdrsz - 6)
        kind = flags & (_P_BRANCH | _P_LEAF | _P_OVERFLOW | _P_META | _P_LEAF2)
        want = _P_LEAF if depth == 1 else _P_BRANCH
        if mp_pgno != pgno or kind != want:
            raise _Damage(f"page {pgno} of {name} is scrambled: not the {'leaf' if depth == 1 else 'branch'} page its parent points to")
        ptrs_start = hdrsz - pagebase  # mp_lower and mp_upper count from PAGEBASE
        if not ptrs_start <= lower <= upper <= psize - pagebase or (lower - ptrs_start) % 2:
            raise _Damage(f"page {pgno} of {name} is scrambled: bounds {lower}..{upper}")
        count = (lower - ptrs_start) // 2
        if depth > 1 and count == 0:
            raise _Damage(f"page {pgno} of {name} is scrambled: a branch page without keys")
        for i, ptr in enumerate(struct.unpack_from(f"={count}H", page, hdrsz)):
            node = ptr + pagebase
            if node < upper + pagebase or node + _NODE.size > psize:
                raise _Damage(f"page {pgno} of {name} is scrambled: node {i} lies outside the page")
            lo, hi, node_flags, ksize = _NODE.unpack_from(page, node)
            key_end = node + _NODE.size + ksize
            if key_end > psize:
                raise _Damage(f"page {pgno} of {name} is scrambled: key {i} runs past the page")
            if depth > 1:  # a branch node: the child's page number in mn_lo, mn_hi and mn_flags
                todo.append((lo | hi << 16 | node_flags << 32, depth - 1, name, db_flags))
                continue
            key = page[node + _NODE.size : key_end].decode(errors="replace")
            dsize = lo | hi << 16
            if node_flags & ~(_F_BIGDATA | _F_SUBDATA | _F_DUPDATA) or node_flags & _F_DUPDATA and not db_flags & _MDB_DUPSORT:
                raise _Damage(f"page {pgno} of {name} is scrambled: node flags {node_flags:#x} for key {key!r}")
            if node_flags & _F_BIGDATA:  # the value lives in overflow pages: a u64 page number here
                if key_end + 8 > psize:
                    raise _Damage(f"page {pgno} of {name} is scrambled: key {key!r} runs past the page")
                (first,) = struct.unpack_from("=Q", page, key_end)
                page_range(f"key {key!r} of {name}", first, (hdrsz - 1 + dsize) // psize + 1)  # OVPAGES
                continue
            if key_end + dsize > psize:
                raise _Damage(f"page {pgno} of {name} is scrambled: the value of key {key!r} runs past the page")
            if node_flags & _F_SUBDATA and not node_flags & _F_DUPDATA:  # a named database (in the main database)
                if dsize != _DB.size:
                    raise _Damage(f"page {pgno} of {name} is scrambled: the record of database {key!r}")
                tree(f"database {key!r}", _DB.unpack_from(page, key_end))
