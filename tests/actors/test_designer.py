"""The hint writer's retries (the reference: 3 attempts, backing off; on total failure no hint, regret 0)."""

import trio

from actors.designer import write_hint
from actors.inference.base import Generation
from engine.config import PlayConfig
from tests.actors.test_agent import FakeTokenizer


class FlakyBatcher:
    """Fails (raises, or answers an empty hint) as scripted, then answers."""

    def __init__(self, outcomes):
        self.outcomes = list(outcomes)
        self.calls = 0

    async def generate(self, request):
        self.calls += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        ids = [ord(c) for c in outcome]
        return Generation(completion_ids=ids, logprobs=[-0.1] * len(ids), text=outcome, finish_reason="stop", policy_version=0)


def _hint(outcomes, attempts=3):
    batcher = FlakyBatcher(outcomes)
    config = PlayConfig(hint_attempts=attempts, hint_retry_backoff_s=0.01)
    hint, tokens = trio.run(lambda: write_hint("class XEnv: ...", batcher=batcher, tokenizer=FakeTokenizer(), play_config=config))
    return hint, tokens, batcher.calls


def test_a_failed_hint_call_is_retried():
    assert _hint([RuntimeError("server gone"), "", "Try the middle first."]) == ("Try the middle first.", 21, 3)


def test_every_call_failing_gives_no_hint():
    assert _hint([RuntimeError("a"), RuntimeError("b"), RuntimeError("c")]) == ("", 0, 3)
    assert _hint([RuntimeError("a"), "ok"], attempts=1) == ("", 0, 1)  # one attempt: the project's first way
