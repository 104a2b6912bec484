"""The tool-use seeds pass the validator; the tool-use episode (actors/tool_use/agent.py) with a scripted agent:
following the plan completes every seed, not following it fails; unknown tools, exceptions, masking."""

import json

import pytest
import trio

from actors.tool_use.agent import play_tool_episode
from actors.inference.base import Generation
from actors.sandbox import open_sandbox_pool
from actors.settings import validate_environment
from engine.protocol.config import PlayConfig
from engine.protocol.messages import PlayTask, unpack_mask
from engine.protocol.paths import TOOL_USE_SEEDS_DIR

SEEDS = TOOL_USE_SEEDS_DIR
MANIFEST = json.loads((SEEDS / "manifest.json").read_text())
TOOL_USE_SKILLS = {"API Orchestration", "Data Retrieval", "State Modification", "Error Recovery", "Tool Selection",
                   "Multi-Step Workflows"}


class FakeTokenizer:
    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        text = "".join(f"<{m['role']}>{m['content']}</>" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}

    def convert_ids_to_tokens(self, token_id):
        return chr(token_id)


class FakeBatcher:
    def __init__(self, replies):
        self.replies, self.prompts, self.stops = list(replies), [], []

    async def generate(self, request):
        self.prompts.append("".join(chr(i) for i in request.prompt_ids))
        self.stops.append(request.stop)
        text = self.replies.pop(0) if self.replies else "<answer>done</answer>"
        ids = [ord(c) for c in text]
        return Generation(completion_ids=ids, logprobs=[-0.5] * len(ids), text=text, finish_reason="stop", policy_version=3)


def _task(code, seed=5, hint=""):
    return PlayTask(task_id="t", env_id="e", skill="Tool Selection", code=code, hint=hint, arm="hint" if hint else "no_hint",
                    seed=seed, step=0, setting="tool_use")


async def _plan(pool, code, seed):
    async with pool.open_episode(code) as episode:
        await episode.reset(seed=seed)
        return await episode.solution()


def _play(code, replies=None, seed=5, hint="", **play):
    async def main():
        async with open_sandbox_pool(workers=1) as pool:
            script = replies if replies is not None else await _plan(pool, code, seed)
            batcher = FakeBatcher(script)
            config = PlayConfig(max_turns=play.pop("max_turns", 12), **play)
            result = await play_tool_episode(_task(code, seed, hint), batcher=batcher, pool=pool, tokenizer=FakeTokenizer(),
                                        play_config=config, worker_id="w")
            return result, batcher
    return trio.run(main)


def test_the_manifest_lists_four_domain_families_with_tool_use_skills():
    assert len(MANIFEST) >= 4 and {e["skill"] for e in MANIFEST} <= TOOL_USE_SKILLS
    assert sorted(e["file"] for e in MANIFEST) == sorted(p.name for p in SEEDS.glob("*.py"))


def test_every_seed_passes_the_validator():
    async def main():
        async with open_sandbox_pool(workers=2) as pool:
            return [(e["file"], await validate_environment(pool, (SEEDS / e["file"]).read_text(), hint=e["hint"])) for e in MANIFEST]
    for name, verdict in trio.run(main):
        assert verdict.valid, (name, verdict.reason)
        assert {"schemas_valid", "deterministic", "solution_solves", "criteria_at_reset"} <= {c.name for c in verdict.checks if c.passed}


@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: e["file"])
def test_a_scripted_agent_following_the_plan_completes_the_seed(entry):
    code = (SEEDS / entry["file"]).read_text()
    result, batcher = _play(code, hint=entry["hint"])
    assert result.status == "completed" and result.episode_return == 1.0, result
    assert "HINT: " + entry["hint"] in batcher.prompts[0]
    assert "Tools:" in batcher.prompts[0]  # this template ignores tools=: the specs are in the system message
    assert any(t.parse_rule == "tool_call" for t in result.turns) and result.turns[-1].parse_rule == "answer_tag"
    assert "<tool>" in batcher.prompts[-1] and "[ALL STEPS COMPLETE]" in batcher.prompts[-1]
    assert set(batcher.stops) == {("</answer>", "</tool_call>")}  # play.stop_at_action: a reply ends at its action


@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: e["file"])
def test_an_agent_that_does_not_follow_the_plan_fails(entry):
    code = (SEEDS / entry["file"]).read_text()
    async def wrong():
        async with open_sandbox_pool(workers=1) as pool:
            plan = await _plan(pool, code, 5)
        return plan[:1] + ["<answer>done</answer>"] * 3  # stops after the first call
    replies = trio.run(wrong)
    result, _ = _play(code, replies, max_turns=4)
    assert result.episode_return == 0.0 and result.status == "truncated"


def test_unknown_tools_and_exceptions_come_back_as_error_text():
    code = (SEEDS / "banking.py").read_text()
    replies = ['<tool_call>{"name": "launch_rocket", "arguments": {}}</tool_call>'
               '<tool_call>{"name": "get_balance", "arguments": {"account": "moon"}}</tool_call>'
               '<tool_call>{"name": "transfer", "arguments": {"amount": 1}}</tool_call>']
    result, batcher = _play(code, replies, max_turns=2)
    last = batcher.prompts[-1]
    assert "Error: unknown tool 'launch_rocket'" in last
    assert "Error: ValueError: account must be one of" in last
    assert "Error: bad arguments for transfer" in last
    assert [t.parse_rule for t in result.turns[:3]] == ["tool_call"] * 3 and result.episode_return == 0.0


def test_malformed_calls_are_a_format_error_and_masked_when_asked():
    code = (SEEDS / "calendar.py").read_text()
    bad = '<tool_call>{"name": oops}</tool_call>'
    for mask in (False, True):
        result, batcher = _play(code, [bad, "<answer>done</answer>"], max_turns=2, mask_malformed_tool_calls=mask)
        assert result.turns[0].parse_rule == "malformed_tool_call" and result.turns[0].reward == pytest.approx(-0.1)
        assert "Format error" in batcher.prompts[1]
        assert ("could not be parsed" in batcher.prompts[1]) == mask
        mask_bits = unpack_mask(result.agent.loss_mask)
        assert sum(mask_bits) == (len("<answer>done</answer>") if mask else len(bad) + len("<answer>done</answer>"))


def test_a_hanging_tool_fails_the_play_with_its_own_timeout():
    code = (SEEDS / "banking.py").read_text().replace('        return f"1 {currency} = 1.08 USD"', "        while True:\n            pass")
    replies = ['<tool_call>{"name": "get_exchange_rate", "arguments": {"currency": "EUR"}}</tool_call>']
    result, _ = _play(code, replies, tool_timeout_s=0.5)
    assert result.status == "failed" and result.failure.startswith("timeout: the call took longer than 0.5")
