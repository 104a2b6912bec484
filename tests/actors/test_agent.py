"""The agent's episode loop against the real sandbox, with a fake batcher that replies with chosen text."""

from pathlib import Path

import trio

from actors.agent import episode_return, play_game_episode
from actors.inference.base import Generation
from actors.sandbox import open_sandbox_pool
from engine.protocol.config import PlayConfig
from engine.protocol.messages import PlayTask, unpack_floats, unpack_ints, unpack_mask
from tests.actors.agent_helpers import FakeTokenizer

PICK = (Path(__file__).parents[1] / "e2e" / "data" / "pick_env.py").read_text()
RAISES = PICK.replace('        if guess == str(self.target):', '        if guess == "boom":\n            raise ValueError("kaboom")\n        if guess == str(self.target):')


class FakeBatcher:
    def __init__(self, replies):
        self.replies = list(replies)
        self.prompts, self.stops = [], []

    async def generate(self, request):
        self.prompts.append(request.prompt_ids)
        self.stops.append(request.stop)
        text = self.replies.pop(0)
        ids = [ord(c) for c in text]
        return Generation(completion_ids=ids, logprobs=[-0.25] * len(ids), text=text, finish_reason="length", policy_version=7)


def _task(code, hint=""):
    return PlayTask(task_id="t", env_id="e", skill="s", code=code, hint=hint, arm="hint" if hint else "no_hint", seed=1, step=3)


def _play(code, replies, hint="", max_turns=3):
    async def main():
        async with open_sandbox_pool(workers=1) as pool:
            batcher = FakeBatcher(replies)
            result = await play_game_episode(_task(code, hint), batcher=batcher, pool=pool, tokenizer=FakeTokenizer(), play_config=PlayConfig(max_turns=max_turns), worker_id="w")
            return result, batcher

    return trio.run(main)


def test_episode_records_turns_tokens_and_versions():
    result, batcher = _play(PICK, ["hmm", "\\boxed{1}", "\\boxed{2}"], hint="one of two")
    assert "HINT: one of two" in "".join(chr(i) for i in batcher.prompts[0])
    assert result.turns[0].parse_rule == "raw" and result.turns[1].parse_rule == "boxed_first"
    assert result.status == "completed" and result.episode_return in (0.0, 1.0)
    mask = unpack_mask(result.agent.loss_mask)
    assert mask.sum() == sum(len(r) for r in ["hmm", "\\boxed{1}"])
    assert set(unpack_ints(result.agent.versions)[mask == 1].tolist()) == {7}
    assert set(unpack_floats(result.agent.logprobs)[mask == 1].tolist()) == {-0.25}


def test_replies_are_asked_to_stop_at_the_action():
    """`play.stop_at_action` (the default): each turn's request ends the reply at the `}` closing the prefilled box."""
    async def main(config):
        async with open_sandbox_pool(workers=1) as pool:
            batcher = FakeBatcher(["1}", "2}"])
            await play_game_episode(_task(PICK), batcher=batcher, pool=pool, tokenizer=FakeTokenizer(), play_config=config, worker_id="w")
            return batcher.stops

    stops = trio.run(main, PlayConfig(max_turns=2))
    assert stops and set(stops) == {("}",)}
    stops = trio.run(main, PlayConfig(max_turns=2, stop_at_action=False))
    assert stops and set(stops) == {()}


def test_truncated_episode_returns_zero():
    result, _ = _play(PICK, ["a", "b"], max_turns=2)
    assert result.status == "truncated" and result.episode_return == 0.0 and len(result.turns) == 2


def test_exception_in_step_gives_minus_one():
    result, _ = _play(RAISES, ["\\boxed{boom}"])
    assert result.episode_return == -1.0 and "kaboom" in result.failure


def test_episode_return_rules():
    assert episode_return(1.0, True) == 1.0
    assert episode_return(5.0, True) == 1.0
    assert episode_return(0.7, False) == 0.0
    assert episode_return(float("nan"), True) == 0.0


def test_a_cut_off_reply_ends_the_episode_when_asked():
    """The reference: a reply without an end-of-turn token (cut at the token limit) ends the episode, truncated."""
    async def main(config):
        async with open_sandbox_pool(workers=1) as pool:
            return await play_game_episode(_task(PICK), batcher=FakeBatcher(["\\boxed{1}", "\\boxed{2}"]), pool=pool, tokenizer=FakeTokenizer(), play_config=config, worker_id="w")

    cut = trio.run(main, PlayConfig(max_turns=3, end_on_cutoff=True))
    assert cut.status == "truncated" and cut.episode_return == 0.0 and cut.turns == []
    assert cut.failure.startswith("cut off: the reply reached play.agent_max_tokens")
    played = trio.run(main, PlayConfig(max_turns=3))  # the default keeps playing a cut reply
    assert len(played.turns) >= 1


def test_a_hung_step_fails_the_play_in_the_words_the_engine_retires_it_by():
    from engine.plays import hung

    loops = PICK.replace("        self.turn_count += 1\n", "        self.turn_count += 1\n        while True:\n            pass\n", 1)

    batcher = FakeBatcher(["\\boxed{1}"])

    async def main():
        # 3 s: the load and reset fit it on a busy machine; the step's endless loop does not
        async with open_sandbox_pool(workers=1, step_timeout_s=3.0) as pool:
            return await play_game_episode(_task(loops), batcher=batcher, pool=pool, tokenizer=FakeTokenizer(), play_config=PlayConfig(max_turns=2), worker_id="w")

    result = trio.run(main)
    assert batcher.prompts, "the reset did not finish: the hang must be the step's"
    assert result.status == "failed" and hung(result), result.failure
