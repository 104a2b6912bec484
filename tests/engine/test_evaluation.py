"""In-loop evaluation: the probe set's tasks, its metrics row (which no reader of training rows takes for one),
and when it is due."""

from __future__ import annotations

import json

from engine.protocol.config_loading import load_config
from engine.curriculum import load_seeds
from engine.evaluation import InLoopEval, append_row, eval_row, eval_tasks
from engine.protocol.messages import PlayResult, Sample, TaskFailed, decode_reasoning_gym_task, pack_ints
from engine.metrics.steps import MetricsLog
from engine.protocol.paths import RunPaths


def test_envs_suite_plays_every_probe_env_with_the_same_seeds_at_every_version():
    config = load_config("default", None, ["eval.every=2", "eval.episodes=2"])
    seeds = load_seeds()
    tasks, groups = eval_tasks(config, 4, seeds)
    assert len(tasks) == 2 * len(seeds) and all(t.task_id.startswith("eval-v000004-") for t in tasks)
    assert all(t.arm == "no_hint" and t.hint == "" and t.step == -1 for t in tasks)
    later, _ = eval_tasks(config, 6, seeds)
    assert [t.seed for t in tasks] == [t.seed for t in later]
    assert set(groups.values()) == {s.skill for s in seeds}


def test_rg_hard_suite_carries_the_problems():
    config = load_config("default", None, ["eval.suite='rg-hard'", "eval.datasets=['chain_sum', 'maze']", "eval.episodes=3"])
    tasks, groups = eval_tasks(config, 1, [])
    problems = [decode_reasoning_gym_task(t.code) for t in tasks]
    assert [(p.dataset, p.index) for p in problems] == [("chain_sum", i) for i in range(3)] + [("maze", i) for i in range(3)]
    assert all(p.seed == 42 and p.max_turns == 2 and p.temperature == 0.6 for p in problems)
    assert groups == {"eval-chain_sum": "math", "eval-maze": "cognition"}


def _result(env_id, ret, status="completed", version=3):
    sample = Sample(sample_id="x", role="agent", env_id=env_id, skill="s", arm="no_hint", step=-1, tokens=pack_ints([1, 2]),
                    loss_mask=b"\x00\x01", logprobs=b"\x00" * 8, versions=pack_ints([-1, version]), reward=ret)
    return PlayResult(task_id="eval-x", worker_id="w", env_id=env_id, arm="no_hint", seed=0, status=status, failure="",
                      episode_return=ret, turns=[], agent=sample, tokens_generated=1, seconds=0.1)


def test_row_and_metrics_log_leave_each_other_alone(tmp_path):
    config = load_config("default", None, ["eval.every=1"])
    results = [_result("eval-a", 1.0), _result("eval-a", 0.0), _result("eval-b", 1.0, "failed"), TaskFailed(task_id="t", worker_id="w", reason="x")]
    row = eval_row(config, 3, results, {"eval-a": "math", "eval-b": "logic"}, 1.0)
    e = row["eval"]
    assert (e["episodes"], e["wins"], e["failed"], e["groups"]) == (4, 1, 2, {"logic": 0.0, "math": 0.5})
    assert e["sampled_versions"] == [3, 3] and 0.0 < e["low"] < 0.25 < e["high"]
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.write(0, {"step": 0, "envs_requested": 1}, {}, 1)
    append_row(tmp_path / "metrics.jsonl", row)
    log.write(0, {"step": 0, "envs_requested": 1}, {}, 1)  # the same version again: rows are rewritten
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert sum("eval" in r for r in rows) == 1 and sum("step" in r for r in rows) == 1
    assert set(log.step_rows()) == {0}


def test_due_versions(tmp_path):
    config = load_config("default", None, ["eval.every=2"])
    evaluation = InLoopEval(config, RunPaths(tmp_path), [])
    for version in range(1, 6):
        evaluation.published(version)
    evaluation.published(4)
    assert evaluation.queued == {2, 4}
    evaluation.published(5, final=True)
    assert evaluation.queued == {2, 4, 5}
    append_row(RunPaths(tmp_path).metrics, {"eval": {}, "eval_policy_version": 2})
    assert InLoopEval(config, RunPaths(tmp_path), []).queued == {2}  # a resumed run does not evaluate v2 again
    off = InLoopEval(load_config(), RunPaths(tmp_path / "x"), [])
    off.published(2, final=True)
    assert not off.queued
