"""BFCL-style multi-turn entries (tests/actors/tool_use/data/bfcl_multi_turn.jsonl, written for this project in the
format of BFCL v3's multi-turn category: `question` is one list of user messages per turn, `ground_truth` one list
of Python-syntax calls per turn) replayed through the environment interface in the sandbox and scored: each turn's
user message must be the instruction the environment reveals, its calls are executed as tool calls, and the score is
the reward of the final answer (1.0 only when every instruction is complete)."""

import ast
import json
from pathlib import Path

import pytest
import trio

from actors.sandbox import open_sandbox_pool
from engine.protocol.paths import TOOL_USE_SEEDS_DIR

DATA = Path(__file__).with_name("data") / "bfcl_multi_turn.jsonl"
SEEDS = TOOL_USE_SEEDS_DIR
ENTRIES = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
MARK = "NEW INSTRUCTION] "


def parse_call(text: str) -> tuple[str, dict]:
    """`name(k=v, ...)` with literal values, as BFCL writes its ground truth."""
    node = ast.parse(text, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
        raise ValueError(f"not a keyword call: {text}")
    return node.func.id, {k.arg: ast.literal_eval(k.value) for k in node.keywords}


async def replay(pool, entry: dict) -> tuple[float, list[str]]:
    source = (SEEDS / entry["involved_classes"][0]).read_text()
    revealed = []
    async with pool.open_episode(source) as episode:
        instruction, _ = await episode.reset(seed=entry["initial_config"]["seed"])
        revealed.append(instruction)
        for calls in entry["ground_truth"]:
            for call in calls:
                result = await episode.call_tool(*parse_call(call))
                if MARK in result:
                    revealed.append(result.split(MARK, 1)[1])
        outcome = await episode.step("<answer>done</answer>")
    return (outcome.reward if outcome.terminated else 0.0), revealed


def test_the_entries_are_bfcl_multi_turn_shaped():
    assert len(ENTRIES) >= 5
    for entry in ENTRIES:
        assert {"id", "question", "ground_truth", "involved_classes", "initial_config"} <= set(entry)
        assert len(entry["question"]) == len(entry["ground_truth"])
        assert all(turn and turn[0]["role"] == "user" for turn in entry["question"])
        assert all(parse_call(call) for turn in entry["ground_truth"] for call in turn)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["id"])
def test_entry_replays_and_scores(entry):
    async def main():
        async with open_sandbox_pool(workers=1) as pool:
            return await replay(pool, entry)
    score, revealed = trio.run(main)
    assert score == entry["expected_score"]
    asked = [turn[0]["content"] for turn in entry["question"]]
    assert revealed == (asked if score == 1.0 else asked[: len(revealed)])
