"""The step account (engine/metrics/phases.py): spans cut to the step's interval, the learner's share of a wait,
the refresh's parts, the plays' reload, and the generators' busy share from heartbeats."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.metrics.phases import PHASES, StepClock, biggest_phases, design_round_split


class FakeTime:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _phase_sum(account: dict) -> float:
    return sum(account[f"time_{phase}_s"] for phase in PHASES)


def test_a_synchronous_step_is_admission_then_plays_then_the_engine():
    t = FakeTime()
    clock = StepClock(now=t)
    clock.begin()
    with clock.span(1, "admission"):  # waiting for the learner: 2 s update, 1 s publish, 0.5 s of nothing after
        t.advance(3.0)
        clock.learner_published(update_s=2.0, publish_s=1.0)
        t.advance(0.5)
    with clock.span(1, "plays"):
        t.advance(10.0)
    with clock.span(1, "engine"):
        t.advance(1.5)
    account = clock.close(1, plays_reload=0.75)
    assert account["time_step_s"] == 15.0
    assert account["time_learner_update_s"] == 2.0 and account["time_publish_s"] == 1.0 and account["time_admission_s"] == 0.5
    assert account["time_plays_s"] == 9.25 and account["time_worker_reload_s"] == 0.75 and account["time_engine_s"] == 1.5
    assert _phase_sum(account) == pytest.approx(account["time_step_s"])


def test_spans_are_cut_to_the_step_interval_and_a_gap_shows_as_a_shortfall():
    t = FakeTime()
    clock = StepClock(now=t)
    clock.begin()
    with clock.span(0, "plays"):
        t.advance(4.0)
    with clock.span(1, "plays"):  # step 1 plays while step 0 finishes (run.max_staleness > 0) ...
        t.advance(1.0)
        with clock.span(0, "engine"):
            t.advance(2.0)
        assert clock.close(0)["time_step_s"] == 7.0
        t.advance(3.0)  # ... so only its plays after step 0's send count in its interval
    t.advance(1.0)  # a moment no span covers
    with clock.span(1, "engine"):
        t.advance(1.0)
    account = clock.close(1)
    assert account["time_step_s"] == 5.0 and account["time_plays_s"] == 3.0 and account["time_engine_s"] == 1.0
    assert _phase_sum(account) == 4.0  # the uncovered second is missing, which the e2e check would catch


def test_the_refresh_splits_into_its_parts_and_the_rest_is_the_engine():
    t = FakeTime()
    clock = StepClock(now=t)
    clock.begin()
    with clock.span(0, "refresh"):
        t.advance(10.0)
    parts = {"design": 5.0, "validation": 2.0, "hint": 1.0, "revalidation": 1.0}
    account = clock.close(0, parts)
    assert [account[f"time_{p}_s"] for p in ("design", "validation", "hint", "revalidation", "engine")] == [5.0, 2.0, 1.0, 1.0, 1.0]
    # parts that claim more than the refresh took are scaled down to it
    with clock.span(1, "refresh"):
        t.advance(4.0)
    account = clock.close(1, parts)
    assert _phase_sum(account) == pytest.approx(4.0, abs=1e-3) and account["time_engine_s"] == 0.0


def test_a_design_round_is_split_by_what_its_tasks_report():
    ok = SimpleNamespace(seconds=10.0, validate_s=3.0, hint_s=1.0, policy_wait_s=2.0)
    other = SimpleNamespace(seconds=10.0, validate_s=1.0, hint_s=0.0, policy_wait_s=0.5)
    failed = SimpleNamespace(task_id="x", reason="worker error")  # a TaskFailed reports no times
    split = design_round_split(14.0, [ok, other, failed])
    assert split["worker_reload"] == 2.0
    assert split["validation"] == pytest.approx(12.0 * 4 / 20) and split["hint"] == pytest.approx(12.0 / 20)
    assert sum(split.values()) == pytest.approx(14.0)
    assert design_round_split(3.0, [failed]) == {"design": 3.0, "validation": 0.0, "hint": 0.0, "worker_reload": 0.0}


def test_generator_share_and_concurrency_come_from_heartbeat_differences():
    t = FakeTime()
    clock = StepClock(now=t)
    clock.heartbeat("a", 100.0, 300.0)  # figures from before the step are the mark
    clock.begin()
    t.advance(10.0)
    clock.heartbeat("a", 108.0, 332.0)  # busy 8 of 10 s, 4 generations on average while busy
    clock.heartbeat("b", 50.0, 50.0)  # joins mid-step: its first figures are its mark
    account = clock.close(0)
    assert account["generator_busy_share"] == pytest.approx(8.0 / 20.0) and account["generator_concurrency"] == 4.0
    t.advance(10.0)
    clock.heartbeat("a", float("nan"), 1.0)  # ignored
    clock.heartbeat("a", -1.0, 1.0)  # ignored
    clock.heartbeat("b", 2.0, 2.0)  # went back: a restarted worker of that id, counted from 0
    account = clock.close(1)
    assert account["generator_busy_share"] == pytest.approx(2.0 / 10.0)  # a's last heartbeat came in the step before
    assert account["generator_concurrency"] == 1.0


def test_the_two_biggest_phases_name_the_step_line():
    row = {"time_plays_s": 9.0, "time_design_s": 12.0, "time_engine_s": 1.0, "time_step_s": 22.0}
    assert biggest_phases(row) == [("design", 12.0), ("plays", 9.0)]
