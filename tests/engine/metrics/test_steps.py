import json

import pytest

from engine.protocol.messages import PlayResult, TaskFailed, TurnRecord
from engine.metrics.steps import MetricsLog, StepOutcome, step_metrics
from engine.protocol.metrics_file import append_row
from tests.engine.builders import make_sample


def _turn(rule):
    return TurnRecord(action="1", parse_rule=rule, reward=0.0, terminated=False, truncated=False, policy_version=0, observation_chars=10)


def _play(env_id, arm, episode_return, rules=("boxed_last",), status="completed"):
    return PlayResult(
        task_id=f"{env_id}-{arm}", worker_id="w", env_id=env_id, arm=arm, seed=0, status=status, failure="", episode_return=episode_return,
        turns=[_turn(r) for r in rules], agent=make_sample(f"{env_id}-{arm}", "agent", env_id, "A", arm, 0), tokens_generated=3, seconds=1.0,
    )


def _outcome(step=4, seconds=4.0, tokens=120):
    plays = [
        _play("a", "no_hint", 0.5, rules=("boxed_last", "answer_tag")),  # a partial return is a win
        _play("a", "no_hint", 0.0),
        _play("a", "hint", 1.0),
        _play("a", "hint", 1.0, rules=()),
        _play("b", "no_hint", 0.0),
        _play("b", "no_hint", 0.0, rules=("fallback",)),
        _play("b", "no_hint", 1.0, rules=("boxed_first",), status="failed"),  # its return counts nowhere
        _play("b", "hint", 1.0),
        _play("b", "hint", 0.0),
    ]
    results = plays + [TaskFailed(task_id="lost", worker_id="w", reason="worker lost")]
    return StepOutcome(
        step=step, plays=plays, results=results, agent_samples=8, designer_samples=2, zero_variance_groups=2, dropped_stale=1,
        envs_requested=5, envs_valid=2, tokens=tokens, seconds=seconds,
    )


def test_step_metrics_of_two_envs_and_both_arms():
    row = step_metrics(_outcome(), k=2, env_slots=3, isolation="rlimits")
    # no_hint returns [0.5, 0] of a and [0, 0] of b; hint returns [1, 1] of a and [1, 0] of b
    assert row["win_rate_no_hint"] == pytest.approx(1 / 4)
    assert row["win_rate_hint"] == pytest.approx(3 / 4)
    assert row["mean_return_no_hint"] == pytest.approx(0.5 / 4)
    assert row["mean_return_hint"] == pytest.approx(3 / 4)
    assert row["mean_regret"] == pytest.approx(3 / 4 - 0.5 / 4)
    assert row["learnable_share"] == pytest.approx(0.5)  # a wins 1/2 of its unhinted plays (learnable), b 0
    assert row["active_envs"] == 2
    assert row["plays"] == 9
    assert row["plays_failed"] == 2  # the failed play and the failed task
    # the failed play's turns count: the rule that parsed a reply is known whatever the episode's end
    assert row["parse_rules"] == {"boxed_last": 6, "answer_tag": 1, "fallback": 1, "boxed_first": 1}
    assert row["tokens_per_s"] == pytest.approx(30.0)
    assert (row["step"], row["refresh"], row["env_slots"], row["sandbox"]) == (4, True, 3, "rlimits")
    assert (row["envs_requested"], row["envs_valid"], row["agent_samples"], row["designer_samples"]) == (5, 2, 8, 2)
    assert (row["zero_variance_groups"], row["dropped_stale"], row["tokens_generated"], row["step_seconds"]) == (2, 1, 120, 4.0)
    json.dumps(row)  # one line of metrics.jsonl


def test_step_metrics_between_refreshes_and_of_an_instant_step():
    row = step_metrics(_outcome(step=5, seconds=0.0), k=2, env_slots=3, isolation="rlimits")
    assert row["refresh"] is False
    assert row["tokens_per_s"] == 0.0


def test_step_metrics_of_a_step_without_plays():
    outcome = _outcome()
    outcome.plays, outcome.results = [], [TaskFailed(task_id="t", worker_id="w", reason="r")]
    row = step_metrics(outcome, k=2, env_slots=3, isolation="rlimits")
    assert (row["active_envs"], row["plays"], row["plays_failed"]) == (0, 0, 1)
    assert (row["win_rate_no_hint"], row["mean_regret"], row["learnable_share"], row["parse_rules"]) == (0.0, 0.0, 0.0, {})


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rows_are_appended_one_per_policy_version(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    row = log.write(0, {"step": 0, "plays": 4}, {"loss": 0.5, "staleness": 1.0, "grad_norm": 2.0}, 1)
    assert (row["step"], row["plays"], row["policy_version"], row["learner_loss"], row["staleness"]) == (0, 4, 1, 0.5, 1.0)
    assert row["learner"] == {"loss": 0.5, "staleness": 1.0, "grad_norm": 2.0}
    log.write(1, None, {}, 2)  # no step stats (a flush batch): the row still names its step
    rows = _rows(path)
    assert [(r["step"], r["policy_version"]) for r in rows] == [(0, 1), (1, 2)]
    assert rows[0] == row
    assert (rows[1]["learner_loss"], rows[1]["staleness"], rows[1]["staleness_designer"]) == (0.0, 0.0, 0.0)
    by_role = log.write(2, {"step": 2}, {"staleness": 1.5, "staleness_agent": 0.5, "staleness_designer": 4.0}, 3)
    assert (by_role["staleness"], by_role["staleness_agent"], by_role["staleness_designer"]) == (1.5, 0.5, 4.0)


def test_a_version_written_again_replaces_its_row(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    for version in (1, 2, 3):
        log.write(version - 1, {"step": version - 1, "try": "first"}, {"loss": 1.0}, version)
    log.write(1, {"step": 1, "try": "again"}, {"loss": 0.25}, 2)
    rows = _rows(path)
    assert [(r["policy_version"], r["try"]) for r in rows] == [(1, "first"), (2, "again"), (3, "first")]
    assert rows[1]["learner_loss"] == 0.25
    # a new log on the same file (a restarted engine) knows the versions already there
    MetricsLog(path).write(2, {"step": 2, "try": "resumed"}, {}, 3)
    assert [(r["policy_version"], r["try"]) for r in _rows(path)] == [(1, "first"), (2, "again"), (3, "resumed")]


def test_a_version_resent_after_a_restart_keeps_its_step_figures_and_the_files_order(tmp_path):
    """After kill -9 and --resume the batches the learner lacks are resent without the step's figures (the engine
    that played them is gone): the stored rows keep their figures, only the learner's fields change, and the
    evaluation rows between them stay where they were."""
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    log.write(0, {"step": 0, "plays": 4, "win_rate_no_hint": 0.25}, {"loss": 1.0}, 1)
    append_row(path, {"eval": {"policy_version": 1, "win_rate": 0.5}, "eval_policy_version": 1})
    log.write(1, {"step": 1, "plays": 4, "win_rate_no_hint": 0.5}, {"loss": 2.0}, 2)
    resumed = MetricsLog(path)
    resumed.write(0, None, {"loss": 1.5}, 1)
    resumed.write(1, None, {"loss": 2.5}, 2)
    rows = _rows(path)
    assert [r.get("policy_version", "eval") for r in rows] == [1, "eval", 2]
    assert [(r["step"], r["plays"], r["win_rate_no_hint"], r["learner_loss"]) for r in (rows[0], rows[2])] == [(0, 4, 0.25, 1.5), (1, 4, 0.5, 2.5)]


def test_a_half_written_last_line_is_dropped_when_a_version_is_replaced(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 0, "policy_version": 1}) + "\n" + json.dumps({"step": 1, "policy_version": 2}) + "\n" + '{"step": 2, "poli')
    log = MetricsLog(path)
    log.write(1, {"step": 1, "try": "again"}, {}, 2)
    assert [(r["step"], r["policy_version"]) for r in _rows(path)] == [(0, 1), (1, 2)]


def test_a_half_written_last_line_does_not_swallow_the_next_new_row(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 0, "policy_version": 1}) + "\n" + '{"step": 1, "poli')
    MetricsLog(path).write(1, {"step": 1}, {}, 2)
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    assert [(r["step"], r["policy_version"]) for r in rows] == [(0, 1), (1, 2)]


def _unhinted(env_id, episode_return):
    return _play(env_id, "no_hint", episode_return, rules=())


def test_learnable_shares_per_step_over_slots_and_over_the_window():
    """`learnable_share` is over the environments played; `learnable_share_budget` over every slot; the window
    share (the paper's Figure 6) over every slot of the window's steps, a failed slot counting 0."""
    from engine.metrics.steps import window_share

    outcome = _outcome(step=5)  # 4 slots, 2 environments played: e1 wins 1 of 2 (learnable), e2 2 of 2 (not)
    outcome.plays = [_unhinted("e1", 1.0), _unhinted("e1", 0.0), _unhinted("e2", 1.0), _unhinted("e2", 1.0)]
    outcome.results = list(outcome.plays)
    row = step_metrics(outcome, k=4, env_slots=4, isolation="x")
    assert (row["learnable_share"], row["learnable_envs"], row["learnable_share_budget"]) == (0.5, 1, 0.25)
    assert (row["hint_plays"], row["mean_regret"]) == (0, 0.0)  # no hinted plays: no regret (not minus the return)
    rows = {4: {"env_slots": 4, "learnable_envs": 3}, 5: row, 6: {"env_slots": 4, "learnable_envs": 0}}
    assert window_share(rows, 4, 5) == pytest.approx(4 / 8)
    assert window_share(rows, 4, 6) == pytest.approx(4 / 12)  # a step whose slots all failed counts 0
    assert window_share({}, 0, 3) == 0.0
