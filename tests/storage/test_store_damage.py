"""A damaged store is one line naming the file and the fix: never a traceback, never a signal.

The readers run in a subprocess (LMDB maps the file: a page it trusts past the end of a truncated file is a SIGBUS,
status 135 and nothing printed), and the subprocess must end by itself with an error of ours.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from pathlib import Path

import lmdb
import pytest

from engine.protocol.errors import InputError, RunFailed
from storage.records import MemoryRecord, StoredRecordError
from storage.store import (
    Store,
    StoreAccessError,
    StoreCorrupt,
    StoreFullError,
    StoreMissing,
    check_data_file,
)
from tests.storage.store_helpers import (
    READ_ALL_CODE, RECORDS, make_store, not_killed, read_store, run_python, trajectory_record,
)

PAGE = 4096


# Scramble each page of data.mdb in turn (a fresh copy each time) and read everything: one JSON line per page, so a
# signal shows which page killed the reader.
_EVERY_PAGE = READ_ALL_CODE + r'''
import json, os, random, shutil, sys
source, work = sys.argv[1], sys.argv[2]
pages = os.path.getsize(os.path.join(source, "data.mdb")) // 4096
for page in range(2, pages):
    copy = os.path.join(work, f"p{page}")
    shutil.copytree(source, copy)
    with open(os.path.join(copy, "data.mdb"), "r+b") as f:
        f.seek(page * 4096)
        f.write(random.Random(page).randbytes(4096))
    print(json.dumps({"page": page, **read_all(copy)}), flush=True)
    shutil.rmtree(copy)
'''


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("pristine") / "store")


@pytest.fixture
def store_copy(pristine, tmp_path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(pristine, copy)
    return copy


def test_the_store_made_here_reads_back(store_copy):
    answer = read_store(store_copy)
    assert answer["ok"] == RECORDS
    assert answer["counts"]["meta"] == 1


# ------------------------------------------------------------------ damage
def _truncate_half(data: Path) -> None:
    os.truncate(data, data.stat().st_size // 2)


def _truncate_empty(data: Path) -> None:
    os.truncate(data, 0)


def _truncate_to_one_page(data: Path) -> None:
    os.truncate(data, PAGE + 100)


def _scramble(data: Path, first_page: int, pages: int, seed: int = 0) -> None:
    with open(data, "r+b") as f:
        f.seek(first_page * PAGE)
        f.write(random.Random(seed).randbytes(pages * PAGE))


def _scramble_metas(data: Path) -> None:
    _scramble(data, 0, 2)


def _scramble_meta_1(data: Path) -> None:
    _scramble(data, 1, 1)


def _scramble_meta_fields(data: Path) -> None:  # the magic and version of meta page 0, the rest intact
    with open(data, "r+b") as f:
        f.seek(16)
        f.write(b"\x00" * 8)


DAMAGE = {
    "truncated to half": (_truncate_half, "truncated: "),
    "truncated to 0 bytes": (_truncate_empty, "empty: 0 bytes"),
    "truncated inside page 1": (_truncate_to_one_page, "shorter than its two meta pages"),
    "both meta pages scrambled": (_scramble_metas, "meta page 0 (the header) is scrambled"),
    "meta page 1 scrambled": (_scramble_meta_1, "meta page 1 (the header) is scrambled"),
    "magic number zeroed": (_scramble_meta_fields, "no LMDB magic number"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_store_is_one_line_never_a_signal(store_copy, damage):
    harm, says = DAMAGE[damage]
    data = store_copy / "data.mdb"
    harm(data)
    answer = read_store(store_copy)
    assert answer.get("error") in {"StoreCorrupt", "StoredRecordError"}, answer
    message = answer["message"]
    assert "\n" not in message and str(data) in message and says in message, message
    assert message.endswith("restore it from a backup or start a new run") or "restore the store from a backup" in message


def test_a_scrambled_b_tree_page_in_the_middle_is_store_corrupt(tmp_path):
    """In a store written in one transaction every page is in use (none was copied on write and freed): scramble
    the middle one of its branch and leaf pages."""
    store = Store.open(tmp_path / "store")
    with store.batch() as batch:
        for i in range(300):
            batch.put_trajectory(trajectory_record(f"t{i:03d}", 0, random.Random(i).choice([3, 40, 900])))
    store.close()
    data = tmp_path / "store" / "data.mdb"
    raw = data.read_bytes()
    tree_pages = [
        n for n in range(2, len(raw) // PAGE)
        if int.from_bytes(raw[n * PAGE : n * PAGE + 8], sys.byteorder) == n  # mp_pgno: the page's own number
        and int.from_bytes(raw[n * PAGE + 10 : n * PAGE + 12], sys.byteorder) & 0x03  # mp_flags: P_BRANCH, P_LEAF
    ]
    assert len(tree_pages) > 3
    middle = tree_pages[len(tree_pages) // 2]
    _scramble(data, middle, 1)
    answer = read_store(tmp_path / "store")
    assert answer.get("error") == "StoreCorrupt", answer
    assert f"page {middle} of database 'trajectories' is scrambled" in answer["message"] and str(data) in answer["message"]


def test_every_page_scrambled_in_turn_never_kills_the_reader(pristine, tmp_path):
    proc = run_python(_EVERY_PAGE, pristine, tmp_path, timeout=300)
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    not_killed(proc)  # the last line printed names the page before the one that killed it
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(results) == (pristine / "data.mdb").stat().st_size // PAGE - 2
    kinds = {r.get("error", "ok") for r in results}
    assert kinds <= {"ok", "StoreCorrupt", "StoredRecordError"}, kinds  # ok: a free page, or bytes inside a token array
    assert "StoreCorrupt" in kinds  # the b-tree pages are checked
    for r in results:
        if "error" in r:
            assert "\n" not in r["message"] and f"p{r['page']}" in r["message"], r


def test_a_record_that_does_not_decode_names_it_and_the_file(store_copy):
    env = lmdb.open(str(store_copy), max_dbs=8, map_size=1 << 30)
    with env.begin(write=True) as txn:
        txn.put(b"00000001/t3", b"\x93garbage", db=env.open_db(b"trajectories", txn=txn))
    env.close()
    answer = read_store(store_copy)
    assert answer["error"] == "StoredRecordError"
    assert answer["message"].startswith("record '00000001/t3' in database 'trajectories' is corrupt")
    assert str(store_copy / "data.mdb") in answer["message"]


def test_the_errors_are_input_and_run_errors(store_copy, tmp_path):
    """In process too (the check runs before LMDB maps the file, so no signal even here)."""
    assert issubclass(StoreCorrupt, InputError) and issubclass(StoredRecordError, InputError)
    assert issubclass(StoreFullError, RunFailed) and issubclass(StoreAccessError, InputError)
    _truncate_half(store_copy / "data.mdb")
    with pytest.raises(StoreCorrupt, match=r"^the LMDB store file .*data\.mdb is damaged \(truncated: "):
        Store.open(store_copy)  # the writer checks too: resuming a damaged run would extend the damage
    with pytest.raises(StoreMissing, match="no LMDB store at") as missing:
        Store.open(tmp_path / "nothing", readonly=True)
    assert isinstance(missing.value, FileNotFoundError) and isinstance(missing.value, InputError)


def test_free_pages_past_the_end_of_the_file_are_not_damage(tmp_path):
    """The file may end before the last page the header counts (mm_last_pg) if the pages past its end are free:
    nothing reads them, and the writer writes them before it uses them. Only pages in use count: cut a store's free
    tail off page by page, and every cut the check accepts reads every record and takes writes."""
    path = make_store(tmp_path / "store")
    store = Store.open(path)
    with store.batch() as batch:  # 50 pages at the end of the file ...
        batch.put_memory(MemoryRecord(env_id="big", skill="s", name="X", code="y" * 200_000, win_rate=0.5, regret=0.0, step=5, source="designed"))
    with store.batch() as batch:  # ... given back: free pages
        batch.delete_memory("big")
    store.close()
    data = path / "data.mdb"
    whole = data.read_bytes()
    shortest = len(whole)
    while shortest > PAGE:
        data.write_bytes(whole[: shortest - PAGE])
        try:
            check_data_file(data)
        except StoreCorrupt as exc:
            assert "truncated: " in str(exc)
            break
        shortest -= PAGE
    data.write_bytes(whole[:shortest])  # the shortest file the check accepts
    assert shortest <= len(whole) - 40 * PAGE  # most of the big record's pages were past the cut
    assert read_store(path)["ok"] == RECORDS
    store = Store.open(path)
    with store.batch() as batch:
        batch.put_memory(MemoryRecord(env_id="again", skill="s", name="X", code="z" * 100_000, win_rate=0.5, regret=0.0, step=6, source="designed"))
    store.close()
    assert read_store(path)["ok"] == RECORDS + 1
