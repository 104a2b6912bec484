"""The hint writer's retries (the reference: 3 attempts, backing off; on total failure no hint, regret 0), and a
number edit's redraws of a reply that copies its parent."""

from pathlib import Path

import trio

from actors.designer import design_environment, write_hint
from actors.sandbox import open_sandbox_pool
from engine.protocol.contract import code_fingerprint
from engine.protocol.messages import DesignTask, MemoryExample, unpack_ints, unpack_mask
from actors.inference.base import Generation
from engine.protocol.config import PlayConfig
from tests.actors.agent_helpers import FakeTokenizer


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


# A number edit that copies its parent is drawn again (`play.edit_draws`): only the kept reply is trained.
PICK = (Path(__file__).parents[1] / "e2e" / "data" / "pick_env.py").read_text()  # numbers: 2 (randint(1, 2)) and 9999


def _edit(replies, draws):
    batcher = FlakyBatcher([*replies, "One of two."])
    task = DesignTask(
        task_id="s0001-e00-a1", skill="Mathematical Reasoning", skill_description="", passage_id="", passage="",
        examples=[], negatives=[], attempt=1, step=1, edit_mode="numbers", parent_id="seed-pick",
        parent=MemoryExample(skill="Mathematical Reasoning", win_rate=0.5, regret=0.0, code=PICK, name="PickEnv", env_id="seed-pick"),
    )
    config = PlayConfig(edit_draws=draws, hint_retry_backoff_s=0.01)

    async def main():
        async with open_sandbox_pool(workers=1) as pool:
            return await design_environment(task, batcher=batcher, pool=pool, tokenizer=FakeTokenizer(), play_config=config, worker_id="w0")

    return trio.run(main), batcher.calls


def test_a_number_edit_that_copies_its_parent_is_drawn_again():
    result, calls = _edit(["2, 9999}", "3, 500}"], draws=3)
    assert (result.draws, calls) == (2, 3)  # two designer replies, then the hint
    assert result.valid, result.reason
    assert "randint(1, 3)" in result.code and "500" in result.code
    assert result.reply == "\\boxed{3, 500}"
    completion = [chr(t) for t, m in zip(unpack_ints(result.designer.tokens), unpack_mask(result.designer.loss_mask)) if m]
    assert "".join(completion) == "3, 500}"  # the copy is not in the training sample
    assert result.tokens_generated == len("2, 9999}") + len("3, 500}") + len("One of two.")


def test_redraws_stop_at_edit_draws_and_keep_the_copy():
    result, calls = _edit(["2, 9999}", "2, 9999}"], draws=2)
    assert (result.draws, calls) == (2, 3)  # the engine's duplicate check rejects it (engine/refresh.py)
    assert code_fingerprint(result.code) == code_fingerprint(PICK)
    single, calls = _edit(["2, 9999}", "3, 500}"], draws=1)
    assert (single.draws, calls) == (1, 2)
