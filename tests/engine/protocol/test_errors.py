"""The one error tree and `describe_failure`, the one helper every entry point reports a failure with."""

import pytest

from engine.protocol.errors import BUG, InputError, RunFailed, SpadeError, UsageError, describe_failure


class _Gone(RunFailed):
    """Stands in for a peer gone after its own failure (engine/cli.py passes PeerGone)."""


def test_a_spade_error_is_its_line_and_its_exit_code():
    assert describe_failure(UsageError("--bogus is not an option")) == ("error: --bogus is not an option", 2)
    assert describe_failure(RunFailed("the disk is full")) == ("error: the disk is full", 1)


def test_an_exception_group_holding_a_spade_error_is_unwrapped():
    nested = BaseExceptionGroup("nursery", [ExceptionGroup("inner", [InputError("model path /x does not exist")])])
    assert describe_failure(nested) == ("error: model path /x does not exist", 2)


def test_every_cause_is_a_line_and_the_worst_exit_code_wins():
    group = ExceptionGroup("nursery", [RunFailed("the learner failed"), InputError("bad store")])
    assert describe_failure(group) == ("error: the learner failed\nerror: bad store", 2)


def test_consequences_are_left_out_unless_they_are_all_there_is():
    group = ExceptionGroup("nursery", [_Gone("the worker is gone"), RunFailed("the worker crashed")])
    assert describe_failure(group, consequences=(_Gone,)) == ("error: the worker crashed", 1)
    alone = ExceptionGroup("nursery", [_Gone("the worker is gone")])
    assert describe_failure(alone, consequences=(_Gone,)) == ("error: the worker is gone", 1)


def test_ctrl_c_anywhere_is_an_interruption():
    group = BaseExceptionGroup("nursery", [RunFailed("x"), KeyboardInterrupt()])
    assert describe_failure(group) == ("\ninterrupted", 130)
    assert describe_failure(KeyboardInterrupt()) == ("\ninterrupted", 130)


def test_a_bug_is_its_traceback_and_the_line_that_says_so():
    try:
        {}["missing"]
    except KeyError as exc:
        text, code = describe_failure(ExceptionGroup("nursery", [exc, RunFailed("a consequence")]))
    assert code == 1
    assert "Traceback (most recent call last)" in text
    assert "KeyError: 'missing'" in text
    assert text.endswith(BUG) and BUG.startswith("error: this is a bug in spade-engine")


@pytest.mark.parametrize(
    "module, name, code",
    [
        ("actors.sandbox.errors", "SandboxUnavailable", 1),
        ("actors.inference.vllm", "WeightSyncError", 1),
        ("actors.reasoning_gym.process", "ReasoningGymError", 1),
        ("learner.guards", "NonFiniteWeights", 1),
    ],
)
def test_the_failures_of_actors_and_learner_are_in_the_tree(module, name, code):
    kind = getattr(pytest.importorskip(module), name)
    assert issubclass(kind, SpadeError) and issubclass(kind, RuntimeError)  # still caught where RuntimeError was
    assert describe_failure(kind("it failed")) == ("error: it failed", code)
