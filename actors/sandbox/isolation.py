"""Isolation levels and the command lines that start a sandbox worker at each of them.

From strongest to weakest: bubblewrap (no network, read-only /usr and nothing else of the host, private /tmp,
new pid/ipc/uts/user namespaces, capabilities dropped, dies with its parent), unshare (network and pid
namespaces only: host files stay readable), rlimits (resource limits and a process group only). The worker adds
rlimits at every level and a seccomp deny-list at the first two; `pool.py` tries the candidates in order and
keeps the first whose worker answers.
"""

import enum
import functools
import os
import shutil
import sys
from pathlib import Path

WORKER_SCRIPT = Path(__file__).with_name("worker.py")
SECCOMP_SCRIPT = Path(__file__).with_name("seccomp.py")
SECCOMP_IMPORT = "from actors.sandbox.seccomp import install_seccomp"
TMPFS_BYTES = 64 * 1024 * 1024

# Modules an environment may import (the designer is told this list); `__future__` is a compiler directive.
ALLOWED_MODULES = (
    "math", "random", "re", "itertools", "collections", "string", "json", "dataclasses", "typing", "fractions",
    "heapq", "functools", "statistics", "copy", "decimal", "enum", "abc", "__future__",
)


class IsolationLevel(enum.StrEnum):
    BUBBLEWRAP_SECCOMP = "bubblewrap+seccomp"
    BUBBLEWRAP = "bubblewrap"
    UNSHARE_SECCOMP = "unshare+seccomp"
    UNSHARE = "unshare"
    RLIMITS = "rlimits"

    @property
    def base(self) -> str:
        return self.value.partition("+")[0]

    @property
    def has_namespaces(self) -> bool:
        """Network and process namespaces: no network, no other process visible."""
        return self.base in ("bubblewrap", "unshare")

    @property
    def has_private_filesystem(self) -> bool:
        """Nothing of the host's files but /usr is visible, and nothing can be written to the host."""
        return self.base == "bubblewrap"

    @property
    def has_seccomp(self) -> bool:
        return self.value.endswith("+seccomp")


REQUESTS = {
    "auto": ("bubblewrap", "unshare", "rlimits"),
    "bubblewrap": ("bubblewrap",),
    "unshare": ("unshare",),
    "rlimits": ("rlimits",),
}


def resolve_level(base: str, seccomp: bool) -> IsolationLevel:
    return IsolationLevel(f"{base}+seccomp" if seccomp else base)


@functools.cache
def find_interpreter() -> str:
    """A Python 3 that lives under /usr, so bubblewrap can show it without any of the home directory."""
    for candidate in ("/usr/bin/python3.11", "/usr/bin/python3.12", "/usr/bin/python3.13", "/usr/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return os.path.realpath(sys.executable)


@functools.cache
def worker_source() -> str:
    """worker.py's text with seccomp.py's in place of its import line: one `-c` text, no file to bind or import."""
    lines = WORKER_SCRIPT.read_text().splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.startswith(SECCOMP_IMPORT)]
    if len(at) != 1:
        raise RuntimeError(f"{WORKER_SCRIPT} must have exactly one line starting {SECCOMP_IMPORT!r}")
    lines[at[0]] = SECCOMP_SCRIPT.read_text()
    return "".join(lines)


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


def candidate_commands(base: str, python: str, script_args: list[str]) -> list[list[str]]:
    """The command lines to try for one level, best first; empty if the level's tools are missing."""
    worker = [python, "-I", "-S", *script_args]
    if base == "rlimits":
        return [worker]
    if base == "unshare":
        unshare = shutil.which("unshare")
        if unshare is None:
            return []
        setpriv = shutil.which("setpriv")
        prefix = [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
        flags = ["--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--mount-proc"]
        return [prefix + [unshare, "--map-root-user", *flags, *worker], prefix + [unshare, *flags, *worker]]
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return []
    command = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
               "--setenv", "PATH", "/usr/bin", "--ro-bind", "/usr", "/usr", *_system_links()]
    if _bwrap_supports_size(bwrap):
        command += ["--size", str(TMPFS_BYTES)]
    command += ["--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev", "--chdir", "/"]
    prefix = os.path.realpath(sys.base_prefix)
    if not python.startswith("/usr/"):  # the interpreter's own installation, read-only, and nothing more
        command += ["--ro-bind", prefix, prefix]
    return [command + worker]
