"""Re-validation of designs claimed valid, the engine's side (engine/revalidate.py): who confirmed, what is stored."""

import trio

from engine.protocol.config_loading import load_config
from engine.protocol.messages import TaskFailed, ValidateResult, ValidateTask
from engine.refresh import design_record
from engine.revalidate import revalidate_designs
from tests.engine.builders import DESIGN_TASK, SEEDS, Workers, checked_design, make_designs


def _answer(task: ValidateTask, worker_id: str, valid: bool, reason: str = "") -> ValidateResult:
    return ValidateResult(task_id=task.task_id, worker_id=worker_id, env_id=task.env_id, valid=valid, reason=reason, checks=[],
                          sandbox="fresh_process" if worker_id == task.author else "other_worker", seconds=0.1)


def _run(config, results, answer):
    sent = []

    async def run_tasks(label, tasks):
        sent.extend(tasks)
        return [answer(t) for t in tasks]

    return trio.run(revalidate_designs, config, [DESIGN_TASK] * len(results), results, run_tasks), sent


def test_a_confirmed_design_stays_valid_and_says_who_confirmed_it():
    out, sent = _run(load_config(), [checked_design(worker_id="w0")], lambda t: _answer(t, "w1", True))
    assert [(t.env_id, t.author, t.code, t.hint) for t in sent] == [(DESIGN_TASK.task_id, "w0", "class E: ...", "h")]
    record = design_record(DESIGN_TASK, out[0])
    assert record.valid and record.checks[-1] == ("revalidation", True, "confirmed by w1 (another worker)")
    out, _ = _run(load_config(), [checked_design(worker_id="w0")], lambda t: _answer(t, "w0", True))
    assert out[0].checks[-1][2] == "confirmed by w0 (its author, in a fresh sandbox process)"


def test_a_refuted_design_is_stored_as_rejected_with_the_reason():
    out, _ = _run(load_config(), [checked_design(worker_id="w0")], lambda t: _answer(t, "w1", False, "deterministic: reset(0) differs"))
    record = design_record(DESIGN_TASK, out[0])
    assert not record.valid and record.reason == "revalidation by w1: deterministic: reset(0) differs"
    out, _ = _run(load_config(), [checked_design(worker_id="w0")], lambda t: TaskFailed(task_id=t.task_id, worker_id="w1", reason="boom"))
    assert not out[0].valid and out[0].reason == "revalidation failed: boom"


def test_only_designs_claimed_valid_are_revalidated_and_the_switch_turns_it_off():
    invalid, failed = checked_design(valid=False, reason="x"), TaskFailed(task_id=DESIGN_TASK.task_id, worker_id="w0", reason="r")
    out, sent = _run(load_config(), [invalid, failed], lambda t: _answer(t, "w1", False))
    assert out == [invalid, failed] and sent == []
    design = checked_design()
    out, sent = _run(load_config(overrides=["curriculum.revalidate=false"]), [design], lambda t: _answer(t, "w1", False))
    assert out == [design] and sent == []


def test_refresh_plays_only_what_the_revalidation_confirmed(tmp_path):
    """Designs.refresh with revalidation on: slot 0's design is confirmed, slot 1's refuted (stored rejected, the
    slot retried), and the ValidateTasks go out between the designs and the store."""
    designs, store = make_designs(tmp_path, "curriculum.revalidate=true", "curriculum.design_attempts=2", "curriculum.envs_per_step=2")
    designs.seed_memory(SEEDS)
    workers = Workers(default="valid")
    design_answers = workers.__call__

    async def run_tasks(label, tasks):
        if not isinstance(tasks[0], ValidateTask):
            return await design_answers(label, tasks)
        workers.calls.append((label, tasks))
        return [_answer(t, "w2", not t.env_id.startswith("s0002-e01-a1")) for t in tasks]

    result = trio.run(designs.refresh, 2, run_tasks)
    sent = [(label, task.task_id) for label, tasks in workers.calls for task in tasks]
    for slot in ("e00", "e01"):  # each slot's own order: a design, its revalidation, then (refuted) the next attempt
        assert [x for x in sent if f"-{slot}-" in x[1]] == {
            "e00": [("step 3: designs", "s0002-e00-a1"), ("step 3: revalidating 1 design", "s0002-e00-a1-revalidate")],
            "e01": [("step 3: designs", "s0002-e01-a1"), ("step 3: revalidating 1 design", "s0002-e01-a1-revalidate"),
                    ("step 3: designs", "s0002-e01-a2"), ("step 3: revalidating 1 design", "s0002-e01-a2-revalidate")],
        }[slot]
    assert [e.env_id for e in result.active] == ["s0002-e00-a1", "s0002-e01-a2"] and result.valid == 2
    refuted = store.environment("s0002-e01-a1")
    assert not refuted.valid and refuted.reason.startswith("revalidation by w2")
    assert store.environment("s0002-e00-a1").checks[-1] == ("revalidation", True, "confirmed by w2 (another worker)")
    store.close()
