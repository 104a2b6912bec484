"""The errors a user can cause or fix, in one hierarchy the command line catches in one place (engine/cli.py).

    SpadeError            one line naming the thing and the fix; never a traceback
      InputError  exit 2  bad config, bad path or argument, bad store, bad model, an unwritable place
        UsageError        a bad command line
      RunFailed   exit 1  the run started and could not go on (a failed child, a full disk, a lost peer)

Any other exception is our bug: the CLI prints its traceback and asks for a report. This module is part of the
shared protocol layer (see the README's layout section): every package may import it, and it imports nothing of
ours.
"""

from __future__ import annotations


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
