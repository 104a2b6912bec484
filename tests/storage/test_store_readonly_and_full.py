"""A read-only or full store is one line naming the file and the fix: never a traceback, never a signal.

The read-only and full-disk cases need root (a read-only bind mount or a tmpfs inside `unshare -m`, or an
unprivileged user made with setpriv); they skip, saying why, where the machine cannot. The last ones check in
process that every errno of a full disk is a StoreFullError.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import lmdb
import pytest

from storage.store import Store, StoreFullError
from tests.storage.store_helpers import (
    READ_ALL_CODE, READER_CODE, RECORDS, RECORDS_CODE, REPO, answer_of, make_store, not_killed, read_store, run_python,
    run_shell, trajectory_record,
)

PAGE = 4096
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

# Fill a small filesystem: a filler file first (freed later), then batches until StoreFullError.
_FILL = RECORDS_CODE + READ_ALL_CODE + r'''
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
    proc = run_shell('mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && touch "$2/store/probe" 2>/dev/null && exit 99; '
                  'exec "$3" -c "$4" "$2/store"', tmp_path / "run", tmp_path / "ro", sys.executable, READER_CODE)
    assert proc.returncode != 99, "the bind mount is not read-only"
    answer = answer_of(proc)
    assert answer.get("ok") == RECORDS, answer


@pytest.mark.parametrize("lock_file", ["kept", "absent"])
def test_an_unwritable_copy_reads_every_record_as_another_user(shared_dir, lock_file):
    _need_nobody(shared_dir)
    store = make_store(shared_dir / "store")
    if lock_file == "absent":
        (store / "lock.mdb").unlink()
    subprocess.run(["chmod", "-R", "a-w", str(shared_dir)], check=True)
    answer = read_store(store, prefix=NOBODY)
    assert answer.get("ok") == RECORDS, answer


def test_a_lockless_read_beside_a_live_writer_is_refused(shared_dir):
    """Without its lock file a reader has no slot in the reader table: the live writer could reuse the pages it
    reads. So the fallback to lock=False refuses when another process has the store open."""
    _need_nobody(shared_dir)
    store_path = make_store(shared_dir / "store")
    subprocess.run(["chmod", "-R", "a-w", str(shared_dir)], check=True)
    writer = Store.open(store_path)  # root writes anyway
    try:
        answer = read_store(store_path, prefix=NOBODY)
    finally:
        writer.close()
    assert answer.get("error") == "StoreAccessError", answer
    assert f"is open in another process (pid {os.getpid()})" in answer["message"] and "\n" not in answer["message"]
    assert read_store(store_path, prefix=NOBODY).get("ok") == RECORDS  # the writer gone, the same read works


def test_a_writable_open_of_an_unwritable_store_says_so(shared_dir):
    _need_nobody(shared_dir)
    store_path = make_store(shared_dir / "store")
    subprocess.run(["chmod", "-R", "a-w", str(shared_dir)], check=True)
    code = ("import sys\nfrom storage.store import Store, StoreAccessError\ntry:\n    Store.open(sys.argv[1])\n"
            "except StoreAccessError as exc:\n    print(exc)\n")
    proc = run_python(code, store_path, prefix=NOBODY)
    not_killed(proc)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"cannot open the LMDB store at {store_path} for writing (Permission denied)"), proc.stdout


# ------------------------------------------------------------------ a full disk
def _fill(script: str, *args) -> dict:
    proc = run_shell(script, *args, timeout=300)
    if proc.returncode == 98:
        pytest.skip(f"cannot make the small filesystem here: {proc.stderr.strip()[-300:]}")
    return answer_of(proc)


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
        batch.put_trajectory(trajectory_record("kept", 0, 3))
    return store


def _failing_commit(code: int) -> lmdb.Error:
    exc = lmdb.Error(f"mdb_txn_commit: {os.strerror(code)}")
    exc.code = code  # as LMDB's own errors carry the errno
    return exc


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG])
def test_the_disk_full_errnos_are_store_full(tmp_path, code):
    store = _store_with_record(tmp_path / "store")
    with pytest.raises(StoreFullError, match=r"^the disk is full: the LMDB store at .* cannot grow \(.* free; Error: mdb_txn_commit: "), store.batch() as batch:
        batch.put_trajectory(trajectory_record("lost", 0, 3))
        raise _failing_commit(code)
    assert [t.sample_id for t in store.trajectories()] == ["kept"]
    store.close()


def test_an_io_error_is_store_full_when_the_disk_has_no_room(tmp_path, monkeypatch):
    import storage.store

    store = _store_with_record(tmp_path / "store")
    monkeypatch.setattr(storage.store, "_free_bytes", lambda path: 10 * PAGE)
    with pytest.raises(StoreFullError, match=r"^the disk is full: .*\(0\.0 MiB free; Error: mdb_txn_commit: Input/output error\): free disk space"), store.batch() as batch:
        batch.put_trajectory(trajectory_record("lost", 0, 3))
        raise _failing_commit(errno.EIO)
    monkeypatch.setattr(storage.store, "_free_bytes", lambda path: 100 << 30)
    with pytest.raises(lmdb.Error, match="Input/output error") as other, store.batch():  # room on the disk: a real I/O error
        raise _failing_commit(errno.EIO)
    assert not isinstance(other.value, StoreFullError)
    store.close()
