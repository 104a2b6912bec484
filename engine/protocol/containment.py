"""What a sandbox isolation level leaves uncontained, read from its name alone.

A level's name (actors/sandbox/isolation.py, IsolationLevel) is its wrapping, "bubblewrap", "unshare" or "rlimits",
joined by "+" to the guards that took: "landlock" (reads limited to the system's and the interpreter's files) and
"seccomp" (the deny-list: sockets, new processes, signals, mounts...). The worker reports the name in its hello; the
engine writes what it does not contain to run.json and the live view, and the sandbox pool says the same in its
warning. Part of the shared protocol layer: it imports nothing of ours.
"""

from __future__ import annotations

WRAPPINGS = ("bubblewrap", "unshare", "rlimits")
HOST_READS = "reads of the host's files"
NETWORK = "the network, new processes and signals to the host's processes"


def uncontained(level: str) -> list[str]:
    """What model-written code can still reach at `level` ([] at full containment)."""
    base, *guards = level.split("+")
    if base not in WRAPPINGS or not set(guards) <= {"landlock", "seccomp"}:
        return [f"everything: {level[:40]!r} is not an isolation level this engine knows"]
    private_filesystem, namespaces = base == "bubblewrap", base in ("bubblewrap", "unshare")
    missing = []
    if not (private_filesystem or "landlock" in guards):
        missing.append(HOST_READS)
    if not (namespaces or "seccomp" in guards):
        missing.append(NETWORK)
    return missing
