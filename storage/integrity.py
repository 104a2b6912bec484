"""The check of an LMDB data file before and after it is mapped, so a damaged store is one line, never a signal.

    check_data_file(path)               # a file nobody writes: meta pages and b-trees, plain reads only
    with reading(data) as fd: header_or_raise(data, fd)    # Store.open, before LMDB maps the file
    check_snapshot(env, data)                              # Store.open, after, inside a read transaction
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import lmdb

from storage.errors import FIX as _FIX
from storage.errors import StoreAccessError, StoreCorrupt

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
    with reading(data) as fd:
        _walk_or_raise(data, fd, header_or_raise(data, fd))


@contextlib.contextmanager
def reading(data: Path) -> Iterator[int]:
    try:
        with open(data, "rb") as f:
            yield f.fileno()
    except OSError as exc:
        raise StoreAccessError(f"cannot read the LMDB store file {data} ({exc.strerror or exc}): give this user read access to it") from exc


def header_or_raise(data: Path, fd: int, txnid: int | None = None) -> _Header | None:
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


def check_snapshot(env: lmdb.Environment, data: Path) -> None:
    """Walk the b-trees of the snapshot a read transaction of `env` holds. The transaction takes a slot in the
    reader table, so a live writer does not reuse the snapshot's pages while we read them (an unpinned walk beside
    a writer reads pages it has since rewritten: false damage). Its meta page stays only until the writer's
    second commit after it: read it twice right after the transaction began, and begin again if it has changed."""
    with reading(data) as fd:
        for _attempt in range(100):
            with env.begin() as txn:
                header = header_or_raise(data, fd, txn.id())
                again = header and header_or_raise(data, fd, txn.id())
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
