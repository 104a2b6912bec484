"""The sandbox's errors: what an environment did wrong (EpisodeFailed) and what the machine cannot do
(SandboxUnavailable, a RunFailed of the one error tree, engine/protocol/errors.py: one line, exit 1)."""

from engine.protocol.errors import RunFailed

FAILURE_KINDS = ("error", "timeout", "crashed", "limit", "protocol", "invalid")
DETAIL_CHARS = 2000


class EpisodeFailed(Exception):
    """The environment misbehaved; `kind` is one of FAILURE_KINDS, `detail` says how (bounded length)."""

    def __init__(self, kind: str, detail: str) -> None:
        assert kind in FAILURE_KINDS, kind
        self.kind = kind
        self.detail = detail[-DETAIL_CHARS:]
        super().__init__(f"{kind}: {self.detail}")


class SandboxUnavailable(RunFailed, RuntimeError):
    """No worker could be started at the requested isolation level (an infrastructure problem)."""


class IsolationWarning(UserWarning):
    """The pool runs with weaker isolation than bubblewrap plus seccomp."""
