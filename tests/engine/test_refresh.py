"""The refresh (engine/refresh.py): design tasks, their stored verdicts, retries, reuse, the fixed pool and edits."""

import msgspec
import trio
import trio.testing

from engine.protocol.config_loading import load_config
from engine.curriculum import Passage, PassageSampler, SeedEnvironment
from engine.protocol.messages import DesignTask, TaskFailed
from engine.refresh import design_id, design_record, designer_trajectory
from storage.records import EnvironmentRecord, MemoryRecord
from storage.store import trajectory_key
from tests.engine.builders import CHECKS_BAD, CHECKS_OK, SEEDS, Workers, design_result, make_designs


def test_design_id_names_step_slot_and_attempt():
    assert design_id(0, 0, 1) == "s0000-e00-a1"
    assert design_id(12, 3, 2) == "s0012-e03-a2"
    assert len({design_id(s, e, a) for s in range(3) for e in range(3) for a in range(1, 3)}) == 18


def _task(task_id="s0002-e01-a2", skill="A", step=2, attempt=2):
    return DesignTask(
        task_id=task_id, skill=skill, skill_description=skill.lower(), passage_id="p7", passage="text", examples=[], negatives=[],
        attempt=attempt, step=step,
    )


def test_design_record_of_a_valid_and_a_rejected_design():
    task = _task()
    record = design_record(task, design_result(task))
    assert (record.env_id, record.skill, record.step_created, record.source, record.passage_id, record.attempt) == (
        "s0002-e01-a2", "A", 2, "designed", "p7", 2)
    assert (record.valid, record.reason, record.checks, record.worker_id) == (True, "", CHECKS_OK, "w1")
    assert (record.code, record.reply, record.hint) == ("class Helper: ...\nclass AEnv: ...", "reply to s0002-e01-a2", "hint s0002-e01-a2")
    assert record.designer_sample_id == "s0002-e01-a2"
    rejected = design_record(task, design_result(task, valid=False))
    assert (rejected.valid, rejected.reason, rejected.checks, rejected.code) == (
        False, "reset failed: reset raised ValueError", CHECKS_BAD, "class Broken: ...")


def test_design_record_of_a_failed_task_is_a_rejected_design_with_the_workers_reason():
    task = _task()
    record = design_record(task, TaskFailed(task_id=task.task_id, worker_id="w2", reason="worker lost"))
    assert (record.env_id, record.skill, record.step_created, record.source, record.passage_id, record.attempt) == (
        "s0002-e01-a2", "A", 2, "designed", "p7", 2)
    assert (record.valid, record.reason, record.worker_id) == (False, "worker error: worker lost", "w2")
    assert (record.code, record.reply, record.hint, record.checks, record.designer_sample_id) == ("", "", "", [], "")


def test_designer_trajectory_carries_the_designers_sample_and_verdict():
    task = _task()
    result = design_result(task)
    t = designer_trajectory(task, result)
    assert (t.sample_id, t.role, t.env_id, t.skill, t.arm, t.step, t.status, t.failure, t.episode_return, t.turns) == (
        "s0002-e01-a2", "designer", "s0002-e01-a2", "A", "design", 2, "designed", "", 0.0, [])
    assert t.sample == result.designer
    rejected = designer_trajectory(task, design_result(task, valid=False))
    assert (rejected.status, rejected.failure) == ("rejected", "reset failed: reset raised ValueError")


def _env(env_id, skill, *, source="designed", step=0, valid=True):
    return EnvironmentRecord(
        env_id=env_id, skill=skill, step_created=step, source=source, passage_id="p", attempt=1, code=f"class {skill}{step}Env: ...",
        reply="", hint="h", valid=valid, reason="" if valid else "bad", checks=[], designer_sample_id="", worker_id="w", created_at=0.0,
    )


def test_seed_memory_stores_the_seeds_once_and_keeps_the_memory(tmp_path):
    designs, store = make_designs(tmp_path)
    old = MemoryRecord(env_id="old", skill="A", name="OldEnv", code="", win_rate=0.3, regret=0.2, step=4, source="designed")
    with store.batch() as batch:
        batch.put_memory(old)
    designs.seed_memory(SEEDS)
    first = {e.env_id: e for e in store.environments()}
    designs.seed_memory(SEEDS)  # a resumed run
    assert sorted(e.env_id for e in store.environments()) == ["seed-alpha", "seed-beta"]
    assert {e.env_id: e.created_at for e in store.environments()} == {k: e.created_at for k, e in first.items()}
    alpha = store.environment("seed-alpha")
    assert (alpha.skill, alpha.source, alpha.step_created, alpha.valid, alpha.hint, alpha.code) == (
        "A", "seed", -1, True, "alpha hint", SEEDS[0].code)
    memory = {m.env_id: m for m in store.memory()}
    assert sorted(memory) == ["old", "seed-alpha", "seed-beta"]
    assert memory["old"] == old
    assert (memory["seed-alpha"].name, memory["seed-alpha"].skill, memory["seed-alpha"].source) == ("AlphaEnv", "A", "seed")
    assert memory["seed-beta"].name == "BetaEnv"
    store.close()


def test_reuse_takes_the_newest_designed_of_the_skill_then_its_seeds_then_any_seed(tmp_path):
    designs, store = make_designs(tmp_path)
    assert designs.reuse("A", set()) is None  # nothing stored
    with store.batch() as batch:
        for record in (
            _env("a0", "A", step=0), _env("a4", "A", step=4), _env("bad", "A", step=6, valid=False), _env("b6", "B", step=6),
            _env("seed-a", "A", source="seed", step=-1), _env("seed-b", "B", source="seed", step=-1),
        ):
            batch.put_environment(record)
    picks, taken = [], set()
    while (env := designs.reuse("A", taken)) is not None:
        picks.append((env.env_id, env.skill, env.designed_now))
        taken.add(env.env_id)
    # another skill's designed environment is never reused, nor a rejected one
    assert picks == [("a4", "A", False), ("a0", "A", False), ("seed-a", "A", False), ("seed-b", "B", False)]
    assert designs.reuse("C", set()).env_id in {"seed-a", "seed-b"}  # a skill without environments plays a seed
    reused = designs.reuse("B", set())
    assert (reused.env_id, reused.code, reused.hint, reused.class_name) == ("b6", "class B6Env: ...", "h", "B6Env")
    store.close()


def test_reuse_prefers_the_environment_likeliest_to_give_its_group_variance(tmp_path):
    designs, store = make_designs(tmp_path)
    designs.seeds = [SeedEnvironment(name=n, skill="A", code="class XEnv: ...", hint="h", level=n.split("_")[1])
                     for n in ("a_hard", "a_easy", "a_medium")]
    with store.batch() as batch:
        for record in (_env("lost", "A", step=4), _env("won", "A", step=2),
                       *(_env(f"seed-{s.name}", "A", source="seed", step=-1) for s in designs.seeds)):
            batch.put_environment(record)
        for env_id, rate in (("lost", 0.0), ("won", 0.5)):
            batch.put_memory(MemoryRecord(env_id=env_id, skill="A", name="XEnv", code="", win_rate=rate, regret=0.0,
                                          step=0, source="designed"))
    picks, taken = [], set()
    while (env := designs.reuse("A", taken)) is not None:
        picks.append(env.env_id)
        taken.add(env.env_id)
    # p(1 - p): 0.25 (won at 0.5), 0.24 (easy, 0.4), 0.16 (medium, 0.2); a designed game never won and a hard seed: 0,
    # the newest designed one first
    assert picks == ["won", "seed-a_easy", "seed-a_medium", "lost", "seed-a_hard"]
    store.close()


VERDICTS = {
    "s0002-e00-a1": "valid",
    "s0002-e01-a1": "rejected", "s0002-e01-a2": "failed", "s0002-e01-a3": "valid",
    # slot 2 is rejected at every attempt
}


def _refresh(designs, workers, step=2):
    return trio.run(designs.refresh, step, workers)


def _stored(tmp_path):
    designs, store = make_designs(tmp_path)
    designs.seed_memory(SEEDS)
    with store.batch() as batch:
        batch.put_environment(_env("old-a", "A", step=0))
        batch.put_environment(_env("old-a-rejected", "A", step=0, valid=False))
    return designs, store


def test_refresh_retries_only_the_failed_slots_and_stores_every_attempt(tmp_path):
    designs, store = _stored(tmp_path)
    workers = Workers(VERDICTS)
    result = _refresh(designs, workers)
    # one task a call, each slot's attempts in order (the slots go at their own pace: their order among each other is
    # the scheduler's)
    assert all(len(batch) == 1 for _, batch in workers.calls)
    by_slot = {}
    for label, [task] in workers.calls:
        assert label == "step 3: designs"
        by_slot.setdefault(task.task_id[6:9], []).append(task)
    assert {slot: [t.task_id for t in tasks] for slot, tasks in by_slot.items()} == {
        "e00": ["s0002-e00-a1"],
        "e01": ["s0002-e01-a1", "s0002-e01-a2", "s0002-e01-a3"],
        "e02": ["s0002-e02-a1", "s0002-e02-a2", "s0002-e02-a3"],
    }
    tasks = [t for slot in sorted(by_slot) for t in by_slot[slot]]
    # slots take the active skills round-robin; every task, a retry included, is grounded on a fresh passage
    assert [(t.task_id[6:9], t.skill, t.step, t.attempt) for t in tasks] == [
        ("e00", "A", 2, 1), ("e01", "B", 2, 1), ("e01", "B", 2, 2), ("e01", "B", 2, 3),
        ("e02", "A", 2, 1), ("e02", "A", 2, 2), ("e02", "A", 2, 3)]
    assert len({t.passage_id for t in tasks}) == 7
    # the first attempts are made in slot order, so their passages do not depend on the scheduler
    same_sampler = PassageSampler([Passage(f"p{i}", "") for i in range(20)], seed=0)  # as make_designs builds it
    assert [by_slot[slot][0].passage_id for slot in ("e00", "e01", "e02")] == [same_sampler.sample().passage_id for _ in range(3)]
    # the memory's examples are of the task's own skill
    assert all([e.name for e in t.examples] == (["AlphaEnv"] if t.skill == "A" else ["BetaEnv"]) for t in tasks)

    assert (result.requested, result.valid, result.tokens) == (7, 2, 100 + 7 + 7 + 7 + 100 + 7)
    # the slot whose designs all failed plays the newest earlier valid environment of its skill
    assert [(e.env_id, e.skill, e.designed_now) for e in result.active] == [
        ("s0002-e00-a1", "A", True), ("s0002-e01-a3", "B", True), ("old-a", "A", False)]
    assert result.active[0].class_name == "AEnv" and result.active[0].hint == "hint s0002-e00-a1"

    stored = {e.env_id: e for e in store.environments() if e.step_created == 2}
    assert {env_id: e.valid for env_id, e in stored.items()} == {
        "s0002-e00-a1": True, "s0002-e01-a1": False, "s0002-e01-a2": False, "s0002-e01-a3": True,
        "s0002-e02-a1": False, "s0002-e02-a2": False, "s0002-e02-a3": False}
    assert stored["s0002-e01-a2"].reason == "worker error: worker lost"
    assert stored["s0002-e02-a3"].checks == CHECKS_BAD
    assert all(stored[t.task_id].passage_id == t.passage_id for t in tasks)
    designers = {t.sample_id: t.status for t in store.trajectories(2)}  # not for the failed task: it has no sample
    assert designers == {
        "s0002-e00-a1": "designed", "s0002-e01-a1": "rejected", "s0002-e01-a3": "designed",
        "s0002-e02-a1": "rejected", "s0002-e02-a2": "rejected", "s0002-e02-a3": "rejected"}
    assert store.trajectory(trajectory_key(2, "s0002-e00-a1")).role == "designer"
    store.close()


class SlowWorkers(Workers):
    """Scripted workers whose tasks take `seconds[task_id]` (default 1) of trio's clock; records when each is sent."""

    def __init__(self, verdicts, seconds):
        super().__init__(verdicts)
        self.seconds = seconds
        self.sent = {}

    async def __call__(self, label, tasks):
        for task in tasks:
            self.sent[task.task_id] = trio.current_time()
        await trio.sleep(max(self.seconds.get(t.task_id, 1.0) for t in tasks))
        return await super().__call__(label, tasks)


def test_a_slot_retries_at_once_without_waiting_for_the_other_slots(tmp_path):
    """Slot 0's first design takes 100 s; slot 1's fails after 1 s and its second attempt goes out then, not after
    slot 0's: the refresh takes slot 0's 100 s, not 100 s + a second round."""
    designs, store = _stored(tmp_path)
    workers = SlowWorkers({"s0002-e00-a1": "valid", "s0002-e01-a2": "valid", "s0002-e02-a1": "valid"},
                          {"s0002-e00-a1": 100.0})
    clock = trio.testing.MockClock(autojump_threshold=0)
    result = trio.run(designs.refresh, 2, workers, clock=clock)
    assert workers.sent == {"s0002-e00-a1": 0.0, "s0002-e01-a1": 0.0, "s0002-e02-a1": 0.0, "s0002-e01-a2": 1.0}
    assert clock.current_time() == 100.0
    assert [e.env_id for e in result.active] == ["s0002-e00-a1", "s0002-e01-a2", "s0002-e02-a1"]
    assert (result.requested, result.valid) == (4, 3)
    store.close()


def test_every_design_task_carries_the_version_it_may_start_on(tmp_path):
    designs, store = _stored(tmp_path)
    workers = Workers(VERDICTS)
    trio.run(designs.refresh, 2, workers, 5)
    assert {t.min_policy_version for _, batch in workers.calls for t in batch} == {5}  # retries too
    store.close()
    edits, store = _edit_designs(tmp_path / "edits")
    workers = EditWorkers(lambda task: VARIANT)
    trio.run(edits.refresh, 0, workers, 4)
    [task] = workers.calls[0][1]
    assert task.parent is not None and task.min_policy_version == 4
    store.close()


def test_refresh_stops_once_every_slot_is_filled(tmp_path):
    designs, store = _stored(tmp_path)
    workers = Workers(default="valid")
    result = _refresh(designs, workers, step=0)
    assert sorted(workers.task_ids()) == [["s0000-e00-a1"], ["s0000-e01-a1"], ["s0000-e02-a1"]]
    assert (result.requested, result.valid, result.tokens) == (3, 3, 300)
    assert [(e.env_id, e.designed_now) for e in result.active] == [
        ("s0000-e00-a1", True), ("s0000-e01-a1", True), ("s0000-e02-a1", True)]
    store.close()


def test_without_reuse_a_slot_whose_designs_all_failed_stays_empty(tmp_path):
    designs, store = make_designs(tmp_path, "curriculum.reuse_valid_envs=false")
    designs.seed_memory(SEEDS)
    with store.batch() as batch:
        batch.put_environment(_env("old-a", "A", step=0))
    result = _refresh(designs, Workers(VERDICTS))
    assert [e.env_id for e in result.active] == ["s0002-e00-a1", "s0002-e01-a3"]
    assert (result.requested, result.valid) == (7, 2)
    store.close()


def test_reuse_fills_the_empty_slots_with_distinct_environments(tmp_path):
    designs, store = _stored(tmp_path)
    result = _refresh(designs, Workers())  # every design rejected
    assert result.valid == 0 and result.requested == 9
    # slot 0 (A) takes old-a, slot 1 (B) its seed, slot 2 (A) the seed of A: never one environment twice
    assert [(e.env_id, e.skill, e.designed_now) for e in result.active] == [
        ("old-a", "A", False), ("seed-beta", "B", False), ("seed-alpha", "A", False)]
    store.close()


def test_without_a_designer_no_design_is_asked_for_and_the_seeds_are_played(tmp_path):
    designs, store = make_designs(tmp_path, "curriculum.design=false")
    seeds = SEEDS + [SeedEnvironment(name="gamma", skill="A", code="class GammaEnv:\n    pass\n", hint="gamma hint")]
    designs.seed_memory(seeds)
    workers = Workers(default="valid")
    result = _refresh(designs, workers, step=0)
    assert workers.calls == []
    assert (result.requested, result.valid, result.tokens) == (0, 0, 0)
    assert [e.skill for e in result.active] == ["A", "B", "A"]
    assert sorted(e.env_id for e in result.active) == ["seed-alpha", "seed-beta", "seed-gamma"]
    assert not any(e.designed_now for e in result.active)
    assert all(e.source == "seed" for e in store.environments())
    assert list(store.trajectories()) == []
    store.close()



def test_a_fixed_folder_is_drawn_without_replacement_across_refreshes(tmp_path):
    pool = tmp_path / "pool"
    pool.mkdir()
    for i in range(7):
        (pool / f"g{i}.py").write_text(f"class G{i}Env:\n    pass\n")
    designs, store = make_designs(tmp_path, "curriculum.design=false", f"curriculum.fixed_envs={pool}", "curriculum.refresh_interval=1")
    designs.seed_memory(SEEDS)
    drawn = [[e.env_id for e in _refresh(designs, Workers(), step=step).active] for step in range(2)]
    assert all(len(ids) == 3 for ids in drawn) and len(set(drawn[0] + drawn[1])) == 6  # 6 of the 7, none twice
    assert all(env_id.startswith("fixed-g") for ids in drawn for env_id in ids)
    assert {e.skill for e in store.environments() if e.env_id.startswith("fixed-")} <= {"A", "B"}  # the slots' skills
    store.close()


# --- edit tasks (curriculum.edit_share): a variant of a remembered valid environment

PARENT = "import random\n\n\nclass AlphaEnv:\n    SIZE = 3  # the board\n\n    def reset(self, seed=None):\n        return 'hi', {}\n"
VARIANT = PARENT.replace("SIZE = 3", "SIZE = 5").replace("AlphaEnv", "BiggerAlphaEnv")
COPY = '"""A renamed copy."""\nimport random\n\nclass CopiedEnv:\n    SIZE = 3\n    def reset(self, seed=None):\n        return "hi", {}\n'


class EditWorkers(Workers):
    """Answers every task valid, with the code `write(task)` gives."""

    def __init__(self, write):
        super().__init__(default="valid")
        self.write = write

    async def __call__(self, label, tasks):
        results = await super().__call__(label, tasks)
        return [msgspec.structs.replace(r, code=self.write(t)) for r, t in zip(results, tasks)]


def _edit_designs(tmp_path):
    designs, store = make_designs(tmp_path, "curriculum.edit_share=1", 'curriculum.skills=["A"]', "curriculum.skills_per_refresh=1",
                              "curriculum.envs_per_step=1")
    designs.seed_memory([SeedEnvironment(name="alpha", skill="A", code=PARENT, hint="alpha hint"), SEEDS[1]])
    return designs, store


def test_an_edit_task_hands_the_designer_a_whole_remembered_environment_and_links_its_variant(tmp_path):
    designs, store = _edit_designs(tmp_path)
    workers = EditWorkers(lambda task: VARIANT)
    result = _refresh(designs, workers, step=0)
    [task] = workers.calls[0][1]
    assert task.parent is not None and (task.parent_id, task.parent.code, task.parent.skill) == ("seed-alpha", PARENT, "A")
    assert (task.passage, task.passage_id, task.examples) == ("", "", [])  # the parent is the prompt's example
    record = store.environment("s0000-e00-a1")
    assert (record.valid, record.parent_id, record.code) == (True, "seed-alpha", VARIANT)
    assert (result.requested, result.valid, result.edits_requested, result.edits_valid, result.duplicates) == (1, 1, 1, 1, 0)
    assert result.active[0].designed_now and result.active[0].class_name == "BiggerAlphaEnv"
    store.close()


def test_an_edit_that_reproduces_its_parent_is_rejected_as_a_duplicate(tmp_path):
    designs, store = _edit_designs(tmp_path)
    result = _refresh(designs, EditWorkers(lambda task: COPY), step=0)  # renamed, reformatted, a docstring: still a copy
    for attempt in (1, 2, 3):
        record = store.environment(f"s0000-e00-a{attempt}")
        assert not record.valid and record.reason.startswith("duplicate: reproduces seed-alpha")
        assert record.checks[-1][:2] == ("novel", False) and record.parent_id == "seed-alpha"
    assert (result.valid, result.edits_requested, result.edits_valid, result.duplicates) == (0, 3, 0, 3)
    assert [e.env_id for e in result.active] == ["seed-alpha"]  # the slot plays an earlier environment
    store.close()


def test_an_edit_that_copies_another_remembered_environment_is_a_duplicate_too(tmp_path):
    designs, store = _edit_designs(tmp_path)
    other = PARENT.replace("SIZE = 3", "SIZE = 9")
    with store.batch() as batch:
        batch.put_environment(msgspec.structs.replace(_env("old", "A"), code=other))
        batch.put_memory(MemoryRecord(env_id="old", skill="A", name="AlphaEnv", code=other[:20], win_rate=0.99, regret=0.0, step=0,
                                      source="designed"))  # too easy: never a parent, still remembered
    _refresh(designs, EditWorkers(lambda task: other), step=2)
    assert store.environment("s0002-e00-a1").reason.startswith("duplicate: reproduces old")
    store.close()


def test_no_edit_without_a_parent_that_fits_the_designers_budget(tmp_path):
    designs, store = make_designs(tmp_path, "curriculum.edit_share=1", "play.designer_max_tokens=4")  # 12 characters
    designs.seed_memory(SEEDS)
    workers = Workers(default="valid")
    _refresh(designs, workers, step=0)
    assert all(t.parent is None and t.passage for _, tasks in workers.calls for t in tasks)  # fresh designs
    store.close()


def test_the_paper_preset_asks_for_no_edit():
    assert load_config(preset="paper").curriculum.edit_share == 0.0
