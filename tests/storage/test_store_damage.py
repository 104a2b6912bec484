"""A damaged, read-only or full store is one line naming the file and the fix: never a traceback, never a signal.

The readers run in a subprocess (LMDB maps the file: a page it trusts past the end of a truncated file is a SIGBUS,
status 135 and nothing printed), and the subprocess must end by itself with an error of ours. The read-only and
full-disk cases need root (a read-only bind mount or a tmpfs inside `unshare -m`, or an unprivileged user made with
setpriv); they skip, saying why, where the machine cannot.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import lmdb
import pytest

from engine.protocol.errors import InputError, RunFailed
from engine.protocol.messages import Sample, pack_floats, pack_ints, pack_mask
from storage.records import (
    BatchEntry,
    BatchRecord,
    MemoryRecord,
    RunState,
    StoredRecordError,
    TrajectoryRecord,
)
from storage.store import (
    Store,
    StoreAccessError,
    StoreCorrupt,
    StoreFullError,
    StoreMissing,
    check_data_file,
)

REPO = Path(__file__).resolve().parents[2]
PAGE = 4096
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

# ------------------------------------------------------------------ the code the subprocesses run
_RECORDS = r'''
import os, sys
from engine.protocol.messages import Sample, pack_floats, pack_ints, pack_mask
from storage.records import TrajectoryRecord

def trajectory(sample_id, step, tokens):
    sample = Sample(
        sample_id=sample_id, role="agent", env_id="e", skill="s", arm="hint", step=step, tokens=pack_ints(range(tokens)),
        loss_mask=pack_mask([1] * tokens), logprobs=pack_floats([0.0] * tokens), versions=pack_ints([0] * tokens), reward=1.0,
    )
    return TrajectoryRecord(
        sample_id=sample_id, role="agent", env_id="e", skill="s", arm="hint", step=step, seed=1, status="completed",
        failure="", episode_return=1.0, turns=[], sample=sample, created_at=0.0,
    )
'''

# Open read-only and read every record of every database; print one JSON line: {"ok": records} or {"error": class,
# "message": ...} for an error of ours (SpadeError). Anything else is a traceback (exit 1).
_READ_ALL = r'''
def read_all(path):
    from engine.protocol.errors import SpadeError
    from storage.store import DATABASES, Store
    try:
        store = Store.open(path, readonly=True)
        try:
            n = sum(1 for name in ("environments", "trajectories", "memory", "designer_rewards", "batches")
                    for _ in getattr(store, name)())
            store.state()
            counts = store.counts()
        finally:
            store.close()
        return {"ok": n, "counts": counts}
    except SpadeError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
'''

_READER = _READ_ALL + r'''
import json, sys
print(json.dumps(read_all(sys.argv[1])))
'''

# Scramble each page of data.mdb in turn (a fresh copy each time) and read everything: one JSON line per page, so a
# signal shows which page killed the reader.
_EVERY_PAGE = _READ_ALL + r'''
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

# Fill a small filesystem: a filler file first (freed later), then batches until StoreFullError.
_FILL = _RECORDS + _READ_ALL + r'''
import json
from engine.protocol.errors import RunFailed
from storage.store import Store, StoreFullError
mount = sys.argv[1]
with open(os.path.join(mount, "filler"), "wb") as f:
    f.write(b"x" * (512 << 10))
store = Store.open(os.path.join(mount, "store"))
result = {"writemap": store._env.flags()["writemap"], "committed": 0}
for step in range(10_000):
    try:
        with store.batch() as batch:
            for i in range(3):
                batch.put_trajectory(trajectory(f"t{i}", step, 500))
    except StoreFullError as exc:
        cause = exc.__cause__
        result.update(error=type(exc).__name__, message=str(exc), cause=type(cause).__name__,
                      errno=getattr(cause, "code", None), is_run_failed=isinstance(exc, RunFailed))
        break
    result["committed"] += 3
result["readable_after_full"] = sum(1 for _ in store.trajectories())
os.remove(os.path.join(mount, "filler"))
with store.batch() as batch:  # room again: the same store writes again
    batch.put_trajectory(trajectory("after", 99_999, 500))
store.close()
result["reread"] = read_all(os.path.join(mount, "store"))
print(json.dumps(result))
'''


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _python(code: str, *args, prefix: list[str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*(prefix or []), sys.executable, "-c", code, *map(str, args)],
        capture_output=True, text=True, cwd=REPO, env=_env(), timeout=timeout, check=False,
    )


def _shell(script: str, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `script` with sh inside a private mount namespace (nothing it mounts leaks); $1.. are args."""
    return subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, env=_env(), timeout=timeout, check=False)


def _not_killed(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"


def _answer(proc: subprocess.CompletedProcess) -> dict:
    _not_killed(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # a traceback is a failure: only our errors are answers
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _read(path: Path, prefix: list[str] | None = None) -> dict:
    return _answer(_python(_READER, path, prefix=prefix))


# ------------------------------------------------------------------ a store made here
def _trajectory(sample_id: str, step: int, tokens: int) -> TrajectoryRecord:
    sample = Sample(
        sample_id=sample_id, role="agent", env_id="e", skill="s", arm="hint", step=step, tokens=pack_ints(range(tokens)),
        loss_mask=pack_mask([1] * tokens), logprobs=pack_floats([0.0] * tokens), versions=pack_ints([0] * tokens), reward=1.0,
    )
    return TrajectoryRecord(
        sample_id=sample_id, role="agent", env_id="e", skill="s", arm="hint", step=step, seed=1, status="completed",
        failure="", episode_return=1.0, turns=[], sample=sample, created_at=0.0,
    )


RECORDS = 5 * 20 + 6 + 5  # trajectories, memory, batches


def make_store(path: Path) -> Path:
    """A few steps of records: small ones inline in leaf pages, large ones in overflow pages."""
    store = Store.open(path)
    for step in range(5):
        with store.batch() as batch:
            for i in range(20):
                batch.put_trajectory(_trajectory(f"t{i}", step, random.Random(i).choice([3, 40, 900])))
            batch.put_batch(BatchRecord(version=step, step=step, checkpoint=False, entries=[BatchEntry(f"{step:08d}/t0", 0.5, 1.0)]))
            batch.put_state(RunState(steps_done=step + 1, batches=step + 1))
    with store.batch() as batch:
        for i in range(6):
            batch.put_memory(MemoryRecord(env_id=f"m{i}", skill="s", name="MEnv", code="x" * 300, win_rate=0.5, regret=0.1, step=4, source="designed"))
    store.close()
    return path


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("pristine") / "store")


@pytest.fixture
def store_copy(pristine, tmp_path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(pristine, copy)
    return copy


def test_the_store_made_here_reads_back(store_copy):
    answer = _read(store_copy)
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
    answer = _read(store_copy)
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
            batch.put_trajectory(_trajectory(f"t{i:03d}", 0, random.Random(i).choice([3, 40, 900])))
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
    answer = _read(tmp_path / "store")
    assert answer.get("error") == "StoreCorrupt", answer
    assert f"page {middle} of database 'trajectories' is scrambled" in answer["message"] and str(data) in answer["message"]


def test_every_page_scrambled_in_turn_never_kills_the_reader(pristine, tmp_path):
    proc = _python(_EVERY_PAGE, pristine, tmp_path, timeout=300)
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    _not_killed(proc)  # the last line printed names the page before the one that killed it
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
    answer = _read(store_copy)
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
    assert _read(path)["ok"] == RECORDS
    store = Store.open(path)
    with store.batch() as batch:
        batch.put_memory(MemoryRecord(env_id="again", skill="s", name="X", code="z" * 100_000, win_rate=0.5, regret=0.0, step=6, source="designed"))
    store.close()
    assert _read(path)["ok"] == RECORDS + 1


# ------------------------------------------------------------------ read-only runs
def _can(args: list[str]) -> bool:
    try:
        return subprocess.run(args, capture_output=True, timeout=60, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture
def shared_dir():
    """A folder an unprivileged user can reach (pytest's tmp_path is 0700 for root)."""
    path = Path(tempfile.mkdtemp(prefix="spade-store-"))
    path.chmod(0o755)
    yield path
    subprocess.run(["chmod", "-R", "u+w", str(path)], check=False)
    shutil.rmtree(path, ignore_errors=True)


def _need_root_mounts() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount inside a private mount namespace (unshare -m)")
    if not shutil.which("unshare") or not _can(["unshare", "-m", "sh", "-c", 'mount -t tmpfs none "$(mktemp -d)"']):
        pytest.skip("cannot mount inside `unshare -m` here (no unshare, or no CAP_SYS_ADMIN in this container)")


def _need_nobody(shared: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run the reader as an unprivileged user")
    if not _can([*NOBODY, sys.executable, "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); import storage.store; import os; os.listdir({str(shared)!r})"]):
        pytest.skip(f"the unprivileged user 65534 cannot run {sys.executable} or read {REPO} and {shared}")


@pytest.mark.parametrize("lock_file", ["kept", "absent"])
def test_a_read_only_bind_mount_reads_every_record(tmp_path, lock_file):
    _need_root_mounts()
    make_store(tmp_path / "run" / "store")
    if lock_file == "absent":
        (tmp_path / "run" / "store" / "lock.mdb").unlink()
    (tmp_path / "ro").mkdir()
    proc = _shell('mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && touch "$2/store/probe" 2>/dev/null && exit 99; '
                  'exec "$3" -c "$4" "$2/store"', tmp_path / "run", tmp_path / "ro", sys.executable, _READER)
    assert proc.returncode != 99, "the bind mount is not read-only"
    answer = _answer(proc)
    assert answer.get("ok") == RECORDS, answer


@pytest.mark.parametrize("lock_file", ["kept", "absent"])
def test_an_unwritable_copy_reads_every_record_as_another_user(shared_dir, lock_file):
    _need_nobody(shared_dir)
    store = make_store(shared_dir / "store")
    if lock_file == "absent":
        (store / "lock.mdb").unlink()
    subprocess.run(["chmod", "-R", "a-w", str(shared_dir)], check=True)
    answer = _read(store, prefix=NOBODY)
    assert answer.get("ok") == RECORDS, answer


def test_a_lockless_read_beside_a_live_writer_is_refused(shared_dir):
    """Without its lock file a reader has no slot in the reader table: the live writer could reuse the pages it
    reads. So the fallback to lock=False refuses when another process has the store open."""
    _need_nobody(shared_dir)
    store_path = make_store(shared_dir / "store")
    subprocess.run(["chmod", "-R", "a-w", str(shared_dir)], check=True)
    writer = Store.open(store_path)  # root writes anyway
    try:
        answer = _read(store_path, prefix=NOBODY)
    finally:
        writer.close()
    assert answer.get("error") == "StoreAccessError", answer
    assert f"is open in another process (pid {os.getpid()})" in answer["message"] and "\n" not in answer["message"]
    assert _read(store_path, prefix=NOBODY).get("ok") == RECORDS  # the writer gone, the same read works


def test_a_writable_open_of_an_unwritable_store_says_so(shared_dir):
    _need_nobody(shared_dir)
    store_path = make_store(shared_dir / "store")
    subprocess.run(["chmod", "-R", "a-w", str(shared_dir)], check=True)
    code = ("import sys\nfrom storage.store import Store, StoreAccessError\ntry:\n    Store.open(sys.argv[1])\n"
            "except StoreAccessError as exc:\n    print(exc)\n")
    proc = _python(code, store_path, prefix=NOBODY)
    _not_killed(proc)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"cannot open the LMDB store at {store_path} for writing (Permission denied)"), proc.stdout


# ------------------------------------------------------------------ a full disk
def _fill(script: str, *args) -> dict:
    proc = _shell(script, *args, timeout=300)
    if proc.returncode == 98:
        pytest.skip(f"cannot make the small filesystem here: {proc.stderr.strip()[-300:]}")
    return _answer(proc)


def _check_full(result: dict, mount: Path) -> None:
    assert result["writemap"] is False  # with writemap a full tmpfs is a SIGBUS on a store into the map
    assert result.get("error") == "StoreFullError", result
    assert result["is_run_failed"]
    message = result["message"]
    assert "\n" not in message and f"the disk is full: the LMDB store at {mount / 'store'} cannot grow" in message
    assert f"free disk space, then continue with `bin/spade-engine up --resume {mount}`" in message
    assert result["committed"] > 0 and result["readable_after_full"] == result["committed"]
    assert result["reread"]["ok"] == result["committed"] + 1  # all that was committed, and the batch after
    print(f"full disk: {result['cause']} errno {result['errno']} ({errno.errorcode.get(result['errno'] or 0, '-')})")


def test_a_full_tmpfs_is_a_store_full_error_and_room_again_writes_again(tmp_path):
    _need_root_mounts()
    mount = tmp_path / "small"
    mount.mkdir()
    result = _fill('mount -t tmpfs -o size=2m tmpfs "$1" || exit 98; exec "$2" -c "$3" "$1"', mount, sys.executable, _FILL)
    _check_full(result, mount)


def test_a_full_ext4_loop_mount_is_a_store_full_error(tmp_path):
    _need_root_mounts()
    if not shutil.which("mkfs.ext4"):
        pytest.skip("no mkfs.ext4 to make a small filesystem image")
    image, mount = tmp_path / "disk.img", tmp_path / "small"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(8 << 20)
    if not _can(["mkfs.ext4", "-q", "-F", str(image)]):
        pytest.skip("mkfs.ext4 failed")
    result = _fill('mount -o loop "$4" "$1" || exit 98; "$2" -c "$3" "$1"; rc=$?; umount "$1"; exit $rc',
                   mount, sys.executable, _FILL, image)
    _check_full(result, mount)


# ------------------------------------------------------------------ full, whatever the errno (in process)
def _store_with_record(path: Path) -> Store:
    store = Store.open(path)
    with store.batch() as batch:
        batch.put_trajectory(_trajectory("kept", 0, 3))
    return store


def _failing_commit(code: int) -> lmdb.Error:
    exc = lmdb.Error(f"mdb_txn_commit: {os.strerror(code)}")
    exc.code = code  # as LMDB's own errors carry the errno
    return exc


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG])
def test_the_disk_full_errnos_are_store_full(tmp_path, code):
    store = _store_with_record(tmp_path / "store")
    with pytest.raises(StoreFullError, match=r"^the disk is full: the LMDB store at .* cannot grow \(.* free; Error: mdb_txn_commit: "), store.batch() as batch:
        batch.put_trajectory(_trajectory("lost", 0, 3))
        raise _failing_commit(code)
    assert [t.sample_id for t in store.trajectories()] == ["kept"]
    store.close()


def test_an_io_error_is_store_full_when_the_disk_has_no_room(tmp_path, monkeypatch):
    import storage.store

    store = _store_with_record(tmp_path / "store")
    monkeypatch.setattr(storage.store, "_free_bytes", lambda path: 10 * PAGE)
    with pytest.raises(StoreFullError, match=r"^the disk is full: .*\(0\.0 MiB free; Error: mdb_txn_commit: Input/output error\): free disk space"), store.batch() as batch:
        batch.put_trajectory(_trajectory("lost", 0, 3))
        raise _failing_commit(errno.EIO)
    monkeypatch.setattr(storage.store, "_free_bytes", lambda path: 100 << 30)
    with pytest.raises(lmdb.Error, match="Input/output error") as other, store.batch():  # room on the disk: a real I/O error
        raise _failing_commit(errno.EIO)
    assert not isinstance(other.value, StoreFullError)
    store.close()
