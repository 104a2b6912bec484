"""The `envs DIR` suite: a folder of environment files played like training environments (the agent's own
episode code, in the sandbox), win = return > 0; a hanging environment fails its episode and the rest go on."""

from __future__ import annotations

import json

import msgspec
import trio

from actors.evaluation.oracle import OracleBackend
from actors.evaluation.runner import play_item
from actors.evaluation.suites import load_suite
from actors.evaluation.table import build_table
from actors.inference.batcher import Batcher
from actors.sandbox import open_sandbox_pool
from engine.protocol.config import PlayConfig

SEVEN = '''import re


class SevenEnv:
    def __init__(self, max_turns=3, **kwargs):
        self.max_turns = max_turns
        self.turn_count = 0

    def reset(self, seed=None):
        self.turn_count = 0
        return "Say seven: answer as \\\\boxed{7}.", {}

    def step(self, action):
        self.turn_count += 1
        won = re.search(r"\\\\boxed\\{7\\}", action) is not None
        return ("Yes!" if won else "No."), (1.0 if won else 0.0), won, self.turn_count >= self.max_turns, {}
'''
HANGS = SEVEN.replace("SevenEnv", "HangEnv").replace("        self.turn_count += 1\n", "        while True:\n            pass\n")


def test_envs_folder_is_played_by_the_agent(tiny_model_path, tmp_path):
    (tmp_path / "seven.py").write_text(SEVEN)
    (tmp_path / "hang.py").write_text(HANGS)
    (tmp_path / "manifest.json").write_text(json.dumps([{"file": "seven.py", "skill": "Logical Deduction", "hint": "say 7"}]))
    suite = load_suite("envs", path=tmp_path, episodes=2, max_turns=2, max_tokens=32)
    assert sorted({(i.dataset, i.family) for i in suite.items}) == [("hang", "envs"), ("seven", "Logical Deduction")]
    backend = OracleBackend(tiny_model_path)
    backend.expect("Say seven", "Sure: \\boxed{7}")
    play = msgspec.structs.replace(PlayConfig(), max_turns=2, agent_max_tokens=32)
    rows = []

    async def main():
        async with trio.open_nursery() as nursery, open_sandbox_pool(
            workers=2, step_timeout_s=1.5, episode_timeout_s=30.0, memory_mb=256, cpu_seconds=10, max_output_bytes=65536,
            episodes_per_worker=50, isolation="auto",
        ) as pool:
            batcher = Batcher(backend, max_batch=4, wait_s=0.0)
            await nursery.start(batcher.run)
            for item in suite.items:
                out = await play_item(item, settings=suite.settings, batcher=batcher, tokenizer=backend.tokenizer,
                                      play_config=play, pool=pool, rg=None, oracle=None)
                rows.append({"model": "m", "dataset": item.dataset, "family": item.family, "episode": item.episode, **out})
            nursery.cancel_scope.cancel()

    trio.run(main)
    by = {(r["dataset"], r["episode"]): r for r in rows}
    assert by[("seven", "0")]["win"] and by[("seven", "1")]["win"] and by[("seven", "0")]["score"] == 1.0
    assert not by[("hang", "0")]["win"] and by[("hang", "0")]["failure"].startswith("timeout")
    table = build_table(rows, models=[("m", "m")], suite=suite)
    assert {r["name"]: r["cells"]["m"]["win_rate"] for r in table["rows"]} == {"Logical Deduction (1)": 1.0, "envs (1)": 0.0, "overall": 0.5}


def test_hinted_adds_the_hinted_arm_with_the_manifests_hints(tmp_path):
    import pytest

    from actors.evaluation.suites import SuiteError

    (tmp_path / "seven.py").write_text(SEVEN)
    (tmp_path / "other.py").write_text(SEVEN.replace("SevenEnv", "OtherEnv"))
    (tmp_path / "manifest.json").write_text(json.dumps([{"file": "seven.py", "skill": "Numbers", "hint": "Say 7."}]))
    plain = load_suite("envs", path=tmp_path, episodes=2)
    assert {(i.dataset, i.family, i.hint) for i in plain.items} == {("seven", "Numbers", ""), ("other", "envs", "")}
    hinted = load_suite("envs", path=tmp_path, episodes=2, hinted=True)
    assert sorted((i.dataset, i.family, i.hint, i.episode) for i in hinted.items) == [
        ("other", "no_hint", "", "0"), ("other", "no_hint", "", "1"),  # no hint in the manifest: no hinted arm
        ("seven", "no_hint", "", "0"), ("seven", "no_hint", "", "1"),
        ("seven+hint", "hint", "Say 7.", "0"), ("seven+hint", "hint", "Say 7.", "1")]
    assert hinted.families == ["hint", "no_hint"]
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(SuiteError, match="gives no environment .* a hint"):
        load_suite("envs", path=tmp_path, hinted=True)
    with pytest.raises(SuiteError, match="--hinted is for --suite envs"):
        load_suite("math", hinted=True)
