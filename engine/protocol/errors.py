"""The errors a user can cause or fix, in one hierarchy, and `describe_failure`, the one place that turns whatever
stopped a command into what it prints and its exit code (every entry point uses it: engine/cli.py,
actors/worker.py, actors/evaluation/cli.py, learner/train.py).

    SpadeError            one line naming the thing and the fix; never a traceback
      InputError  exit 2  bad config, bad path or argument, bad store, bad model, an unwritable place
        UsageError        a bad command line
      RunFailed   exit 1  the run started and could not go on (a failed child, a full disk, a lost peer, a sandbox
                          that cannot start, a failed weight update, non-finite weights, a Reasoning-Gym failure)

Ctrl-C exits 130. Any other exception is our bug: its traceback is printed with a line asking for a report. This
module is part of the shared protocol layer (see the README's layout section): every package may import it, and it
imports nothing of ours.

    try:
        ...
    except BaseException as exc:
        text, code = describe_failure(exc)
        print(text, file=sys.stderr)
        return code
"""

from __future__ import annotations

import traceback

INTERRUPTED_EXIT = 130
BUG = "error: this is a bug in spade-engine, not something you did: please report it with the traceback above"


class SpadeError(Exception):
    """Something a user can cause or fix; the message is one line that names the thing and what to do."""

    exit_code = 1


class InputError(SpadeError):
    """Bad input given to us: a config value, a path, an argument, a stored record, a model folder."""

    exit_code = 2


class UsageError(InputError):
    """A bad command line: an unknown option, a missing file, a run directory that is not one."""


class RunFailed(SpadeError):
    """The run started but could not go on."""

    exit_code = 1


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, as trio raises what its tasks raised."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaf_exceptions(inner)]
    return [exc]


def describe_failure(exc: BaseException, *, consequences: tuple[type[BaseException], ...] = ()) -> tuple[str, int]:
    """(what to print on stderr, the exit code) for `exc`, which may be an exception group (trio raises what its
    tasks raised in groups, nested): Ctrl-C anywhere in it is an interruption; leaves that are all SpadeErrors are
    one `error: ...` line each (leaves of the `consequences` types are left out when something else caused them,
    e.g. a peer gone after its own failure); anything else is a bug, reported with its traceback."""
    leaves = leaf_exceptions(exc)
    if any(isinstance(e, KeyboardInterrupt) for e in leaves):
        return "\ninterrupted", INTERRUPTED_EXIT
    if all(isinstance(e, SpadeError) for e in leaves):
        causes = [e for e in leaves if not isinstance(e, consequences)] or leaves
        return "\n".join(f"error: {e}" for e in causes), max(e.exit_code for e in causes)
    return "".join(traceback.format_exception(exc)) + BUG, 1
