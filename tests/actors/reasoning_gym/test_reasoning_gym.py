"""The Reasoning-Gym process (problems and scores apart from the model's process) and rg-hard episodes scored
against hand-computed answers with the eval-only oracle answerer."""

from __future__ import annotations

import msgspec
import pytest
import trio

from actors.evaluation.oracle import OracleBackend
from actors.reasoning_gym.play import play_reasoning_gym, tagged_answer
from actors.reasoning_gym.process import ReasoningGymError, ReasoningGymProcess
from actors.evaluation.runner import oracle_reply, play_item
from actors.evaluation.suites import load_suite
from actors.evaluation.table import build_table
from actors.inference.batcher import Batcher
from engine.protocol.config import PlayConfig
from engine.protocol.messages import PlayTask, ReasoningGymTask, encode_reasoning_gym_task


@pytest.fixture(scope="module")
def rg():
    process = ReasoningGymProcess(score_timeout_s=5.0)
    yield process
    process.close()


def test_problems_and_scores(rg):
    task = ReasoningGymTask(dataset="chain_sum", params={"min_terms": 2, "max_terms": 2}, seed=42, size=8, index=3)

    async def main():
        question, answer = await rg.problem(task)
        assert (question, answer) == await rg.problem(task)  # deterministic
        assert await rg.score(task, answer) == (1.0, "")
        assert (await rg.score(task, str(int(answer) + 1)))[0] == 0.0
        with pytest.raises(ReasoningGymError, match="not registered"):
            await rg.problem(ReasoningGymTask(dataset="no_such_dataset"))
        # the RLVE path: the curriculum at a difficulty level (harder levels make longer sums)
        easy, _ = await rg.problem(ReasoningGymTask(dataset="chain_sum", difficulty=0, seed=1))
        hard, _ = await rg.problem(ReasoningGymTask(dataset="chain_sum", difficulty=4, seed=1))
        assert len(hard) > len(easy)

    trio.run(main)
    assert rg.seccomp == "on"


def test_hostile_answers_score_zero_and_the_process_recovers(rg, tmp_path):
    marker = tmp_path / "pwned"
    # spiral_matrix's scorer eval()s the answer; the seccomp filter refuses new processes and file writes.
    evil = ReasoningGymTask(dataset="spiral_matrix", params={}, seed=42, size=2, index=0)
    hang = ReasoningGymTask(dataset="countdown", params={}, seed=42, size=2, index=0)  # sympy on an enormous power

    async def main():
        score, failure = await rg.score(evil, f"__import__('os').system('touch {marker}') or [[1]]")
        assert score == 0.0 and not marker.exists()
        score, failure = await rg.score(evil, f"open('{marker}', 'w').write('x')")
        assert score == 0.0 and not marker.exists()
        restarts = rg.restarts
        score, failure = await rg.score(hang, "9**9**9**9**9")
        assert score == 0.0 and failure.startswith("score: ")
        assert rg.restarts == restarts + 1  # killed, and a fresh one answers the next call
        question, answer = await rg.problem(hang)
        assert (await rg.score(hang, answer))[0] == 1.0

    trio.run(main)


def test_tagged_answer():
    assert tagged_answer("think <answer>1</answer> no, <answer> 2 </answer>") == "2"
    assert tagged_answer("the answer is 2") is None


def _run_suite(tiny_model_path, suite, rg, answer):
    backend = OracleBackend(tiny_model_path)
    play = msgspec.structs.replace(PlayConfig(), max_context_tokens=8192)
    rows = []

    async def main():
        async with trio.open_nursery() as nursery:
            batcher = Batcher(backend, max_batch=4, wait_s=0.0)
            await nursery.start(batcher.run)
            for item in suite.items:
                out = await play_item(item, settings=suite.settings, batcher=batcher, tokenizer=backend.tokenizer,
                                      play_config=play, pool=None, rg=rg, oracle=backend, answer=answer)
                rows.append({"model": "m", "dataset": item.dataset, "family": item.family, "episode": item.episode, **out})
            nursery.cancel_scope.cancel()

    trio.run(main)
    return rows


def test_rg_hard_scored_against_hand_computed_answers(tiny_model_path, rg):
    """Correct on episode 0, wrong on 1, malformed (no tags, then after the reminder still none) on 2, per dataset;
    graph_color has no reference answer (many colourings are right), so even the oracle's episode 0 loses."""
    datasets = ["chain_sum", "spell_backward", "graph_color", "maze", "syllogism"]
    suite = load_suite("rg-hard", episodes=3, datasets=datasets, max_tokens=256)

    def answer(item, reference):
        return {"0": oracle_reply(item, reference), "1": "<answer>certainly wrong 0</answer>", "2": "no tags here"}[item.episode]

    rows = _run_suite(tiny_model_path, suite, rg, answer)
    wins = {(r["dataset"], r["episode"]): r["win"] for r in rows}
    expected = {(d, e): (e == "0" and d != "graph_color") for d in datasets for e in "012"}
    assert wins == expected
    malformed = [r for r in rows if r["episode"] == "2"]
    assert all(r["answer"] is None and r["reply"].count("\n---\n") == 1 for r in malformed)  # two turns, no answer
    table = build_table(rows, models=[("m", "oracle")], suite=suite)
    rates = {row["name"]: row["cells"]["oracle"]["win_rate"] for row in table["rows"]}
    # math: chain_sum 1/3; algorithmic: spell_backward 1/3, graph_color 0; cognition: maze 1/3; logic: syllogism 1/3
    assert rates == pytest.approx({"math (1)": 1 / 3, "algorithmic (2)": 1 / 6, "cognition (1)": 1 / 3, "logic (1)": 1 / 3,
                                   "overall": 4 / 15})


def test_worker_path_returns_a_play_result(tiny_model_path):
    backend = OracleBackend(tiny_model_path)
    problem = ReasoningGymTask(dataset="chain_sum", difficulty=1, seed=5, max_turns=2, max_tokens=64)
    task = PlayTask(task_id="s0001-rlve-x-no_hint-00", env_id="rlve-x", skill="math", code=encode_reasoning_gym_task(problem),
                    hint="", arm="no_hint", seed=1, step=1)

    async def main():
        from actors.reasoning_gym.process import reasoning_gym_process

        question, reference = await reasoning_gym_process().problem(problem)
        backend.expect(question, f"<answer>{reference}</answer>")
        async with trio.open_nursery() as nursery:
            batcher = Batcher(backend, max_batch=4, wait_s=0.0)
            await nursery.start(batcher.run)
            result = await play_reasoning_gym(task, batcher=batcher, pool=None, tokenizer=backend.tokenizer,
                                              play_config=PlayConfig(), worker_id="w")
            nursery.cancel_scope.cancel()
        return result

    result = trio.run(main)
    assert (result.status, result.episode_return, result.agent.reward, result.agent.sample_id) == ("completed", 1.0, 1.0, task.task_id)
    assert result.turns[-1].parse_rule == "answer_tag" and result.tokens_generated > 0
