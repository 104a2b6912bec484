"""End to end: `spade-engine up --setting tool-use --steps 2` on the scripted backend with the tiny random model.

The designer's scripted completion is a tool-use environment (one of the seeds' code), the agent's are tool calls
and answers; the run goes through the real processes, the sandbox's tool calls and the learner.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.protocol.paths import TOOL_USE_SEEDS_DIR
from storage.store import Store
from tests.e2e.helpers import REPO, Processes, up_command

SEED = TOOL_USE_SEEDS_DIR / "banking.py"


def up_script(tmp_path: Path) -> Path:
    script = {
        "designer": [SEED.read_text() + "```\n"],
        "hint": ["Phase 1: read the named balance. Phase 2: transfer HALF to savings. Phase 3: pay the bill, then answer."],
        "agent": ['<tool_call>\n{"name": "get_balance", "arguments": {"account": "checking"}}\n</tool_call>',
                  '<tool_call>\n<function=get_balance>\n<parameter=account>travel</parameter>\n</function>\n</tool_call>',
                  "<answer>done</answer>"],
    }
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return path


def test_up_tool_use_two_steps(tiny_model_path, tmp_path):
    run_dir = tmp_path / "run"
    command = up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=2, extra=["--setting", "tool-use", "--set", "play.max_turns=3", "--set", "play.designer_max_tokens=4096"])
    processes = Processes()
    try:
        result = processes.run(command, timeout=400)
    finally:
        processes.end_all()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    store = Store.open(run_dir / "store", readonly=True)
    try:
        envs = list(store.environments())
        designed = [e for e in envs if e.source == "designed"]
        assert designed and all(e.valid and e.setting == "tool_use" for e in designed), [(e.env_id, e.reason) for e in designed]
        assert all(e.skill in {"API Orchestration", "Data Retrieval", "State Modification", "Error Recovery", "Tool Selection",
                               "Multi-Step Workflows"} for e in envs)
        seeds = [e for e in envs if e.source == "seed"]
        assert seeds and all("ToolUseBaseEnv" in e.code for e in seeds)
        agent = [t for t in store.trajectories() if t.role == "agent"]
        assert agent and any(turn.parse_rule == "tool_call" for t in agent for turn in t.turns)
        assert all(t.status != "failed" for t in agent), [t.failure for t in agent if t.status == "failed"]
        memory = list(store.memory())
        assert memory and all(m.setting == "tool_use" for m in memory)
        assert store.state().finished
    finally:
        store.close()
