"""A step's plays (engine/plays.py): the tasks and their seeds, the stored plays, the retirement of hung environments."""

import trio
import trio.testing

from engine.protocol.config_loading import load_config
from engine.curriculum import ActiveEnv
from engine.protocol.messages import PlayResult, TaskFailed, TurnRecord
from engine.plays import Plays, play_tasks, retire, store_plays
from storage.store import Store, trajectory_key
from tests.engine.builders import make_designs, make_sample


def _env(env_id, skill="A"):
    return ActiveEnv(env_id=env_id, skill=skill, code=f"class {env_id.upper()}Env: ...", hint=f"hint for {env_id}",
                     designed_now=True, class_name=f"{env_id.upper()}Env")


def _config(g=3, h=2, seed=0, hint_plays="refresh", group_seeds="distinct"):
    return load_config(overrides=[f"play.plays_per_env={g}", f"play.hint_plays_per_env={h}", f"run.seed={seed}", f"play.hint_plays={hint_plays}",
                                  f"play.group_seeds={group_seeds}"])


def _seeds(tasks):
    return {(t.env_id, t.arm, t.task_id): t.seed for t in tasks}


def test_each_environment_gets_g_plays_without_and_h_with_its_hint():
    tasks = play_tasks(_config(g=3, h=2), 4, [_env("e1", "A"), _env("e2", "B")])
    assert len(tasks) == 2 * (3 + 2)
    for env_id, skill in (("e1", "A"), ("e2", "B")):
        mine = [t for t in tasks if t.env_id == env_id]
        assert sorted(t.arm for t in mine) == ["hint"] * 2 + ["no_hint"] * 3
        assert all(t.skill == skill and t.code == f"class {env_id.upper()}Env: ..." and t.step == 4 for t in mine)
        assert all(t.hint == (f"hint for {env_id}" if t.arm == "hint" else "") for t in mine)
    assert len({t.task_id for t in tasks}) == len(tasks)


def test_hinted_plays_only_at_a_refresh_step_for_environments_made_there():
    """The reference: the hinted plays give the regret at the refresh step, nothing else (k = 2 by default)."""
    made, reused, hintless = _env("e1"), _env("e2"), _env("e3")
    reused.designed_now, hintless.hint = False, ""
    arms = lambda tasks: sorted((t.env_id, t.arm) for t in tasks if t.arm == "hint")
    assert arms(play_tasks(_config(g=1, h=2), 4, [made, reused, hintless])) == [("e1", "hint")] * 2
    assert arms(play_tasks(_config(g=1, h=2), 5, [made, reused, hintless])) == []
    every = play_tasks(_config(g=1, h=1, hint_plays="every_step"), 5, [made, reused, hintless])
    assert arms(every) == [("e1", "hint"), ("e2", "hint")]  # an environment without a hint never gets one


def test_every_task_carries_the_version_it_may_start_on():
    assert {t.min_policy_version for t in play_tasks(_config(), 4, [_env("e1"), _env("e2")], version=3)} == {3}
    assert {t.min_policy_version for t in play_tasks(_config(), 4, [_env("e1")])} == {0}  # no bound given: any version


def test_an_arm_with_no_plays_sends_nothing():
    tasks = play_tasks(_config(g=0, h=2), 0, [_env("e1")])
    assert [t.arm for t in tasks] == ["hint", "hint"]
    assert play_tasks(_config(), 0, []) == []


def test_seeds_are_deterministic_and_differ_across_step_arm_index_and_run_seed():
    active = [_env("e1"), _env("e2")]
    first = play_tasks(_config(), 2, active)
    assert play_tasks(_config(), 2, active) == first  # a replayed step sends the very same tasks
    seeds = [t.seed for t in first]
    assert len(set(seeds)) == len(seeds)  # across environments, arms and indices
    assert all(0 <= s < 2**31 for s in seeds)
    later = play_tasks(_config(), 3, active)
    assert not set(seeds) & {t.seed for t in later}  # another step
    other_run = play_tasks(_config(seed=1), 2, active)
    assert not set(seeds) & {t.seed for t in other_run}  # another run seed
    # an environment's seeds do not depend on which other environments are active
    alone = play_tasks(_config(), 2, [_env("e2")])
    assert [t.seed for t in alone] == [t.seed for t in first if t.env_id == "e2"]


def test_shared_group_seeds_give_a_group_one_instance_hinted_plays_included():
    active = [_env("e1"), _env("e2")]
    tasks = play_tasks(_config(group_seeds="shared"), 4, active)
    by_env = {env_id: {t.seed for t in tasks if t.env_id == env_id} for env_id in ("e1", "e2")}
    assert all(len(seeds) == 1 for seeds in by_env.values())  # both arms, every index: one instance
    assert by_env["e1"] != by_env["e2"]
    assert {t.seed for t in play_tasks(_config(group_seeds="shared"), 5, active) if t.env_id == "e1"} != by_env["e1"]  # a new one each step
    assert play_tasks(_config(group_seeds="shared"), 4, active) == tasks  # a replayed step: the same tasks
    assert len({t.task_id for t in tasks}) == len(tasks)  # the plays stay distinct tasks (and samples)


def test_task_ids_are_unique_and_name_step_env_arm_and_index():
    tasks = play_tasks(_config(g=2, h=1, hint_plays="every_step"), 7, [_env("e1")])
    assert [t.task_id for t in tasks] == ["s0007-e1-no_hint-00", "s0007-e1-no_hint-01", "s0007-e1-hint-00"]


def _result(sample_id, env_id, arm, episode_return, status="completed", seed=5):
    turn = TurnRecord(action="3", parse_rule="boxed_last", reward=episode_return, terminated=True, truncated=False,
                      policy_version=2, observation_chars=40)
    return PlayResult(
        task_id=sample_id, worker_id="w", env_id=env_id, arm=arm, seed=seed, status=status,
        failure="timeout" if status == "failed" else "", episode_return=episode_return, turns=[turn],
        agent=make_sample(sample_id, "agent", env_id, "A", arm, 3), tokens_generated=4, seconds=0.5,
    )


def test_store_plays_stores_only_play_results_and_returns_them(tmp_path):
    store = Store.open(tmp_path / "store")
    played = [_result("p0", "e1", "no_hint", 1.0), _result("p1", "e1", "hint", 0.0, status="failed", seed=9)]
    results = [played[0], TaskFailed(task_id="p2", worker_id="w", reason="worker lost"), played[1]]
    assert store_plays(store, 3, results) == played
    stored = {t.sample_id: t for t in store.trajectories()}
    assert set(stored) == {"p0", "p1"}
    t = store.trajectory(trajectory_key(3, "p1"))
    assert (t.role, t.env_id, t.skill, t.arm, t.step, t.seed, t.status, t.failure, t.episode_return) == (
        "agent", "e1", "A", "hint", 3, 9, "failed", "timeout", 0.0)
    assert t.sample == played[1].agent and t.turns == played[1].turns
    assert store_plays(store, 4, [TaskFailed(task_id="x", worker_id="w", reason="r")]) == []
    assert list(store.trajectories(4)) == []
    store.close()


HANG = "timeout: the call took longer than 10 s"


def test_a_hung_environment_is_retired_and_never_reused(tmp_path):
    from engine.refresh import Designs

    designs, store = make_designs(tmp_path)
    with store.batch() as batch:
        batch.put_environment(_stored("e1", step=0))
        batch.put_environment(_stored("e2", step=1))
    active = [ActiveEnv.of(store.environment("e1"), designed_now=True), ActiveEnv.of(store.environment("e2"), designed_now=True)]
    play = _hung("e1")
    assert retire(store, designs.config, designs.retired, 3, [play], active) == {"e1"}
    assert [e.env_id for e in active] == ["e2"]
    assert store.environment("e1").valid and store.environment("e1").reason.startswith("retired: a call hung at step 3")
    assert designs.reuse("A", {"e2"}) is None  # e1 is never played again (Designs shares the retired set) ...
    assert retire(store, designs.config, designs.retired, 4, [play], active) == set()  # retired once
    store.close()
    again, store = make_designs(tmp_path)  # ... not even after a restart
    assert isinstance(again, Designs) and again.retired == {"e1"}
    store.close()


def test_the_plays_stage_sends_at_once_and_stores_and_retires_on_its_turn(tmp_path):
    designs, store = make_designs(tmp_path, "play.plays_per_env=1", "play.hint_plays_per_env=0")
    with store.batch() as batch:
        batch.put_environment(_stored("e1", step=0))
    active = [ActiveEnv.of(store.environment("e1"), designed_now=True)]
    said, sent = [], []
    stage = Plays(designs.config, store, designs.retired, said.append)

    async def run_tasks(label, tasks):
        sent.append((label, [t.task_id for t in tasks]))
        return [_hung("e1", tasks[0].task_id)]

    async def main():
        turn = trio.Event()
        async with trio.open_nursery() as nursery:
            out = {}

            async def play():
                out["played"] = await stage.play(1, active, run_tasks, turn)

            nursery.start_soon(play)
            await trio.testing.wait_all_tasks_blocked()
            assert sent == [("step 2: plays", ["s0001-e1-no_hint-00"])]  # sent at once ...
            assert list(store.trajectories()) == [] and len(active) == 1  # ... stored and retired on its turn
            turn.set()
        return out["played"]

    played = trio.run(main)
    assert [p.env_id for p in played.plays] == ["e1"] and played.results == played.plays
    assert [t.sample_id for t in store.trajectories(1)] == ["s0001-e1-no_hint-00"]
    assert active == [] and designs.retired == {"e1"}
    assert said == ["step 2: environment e1 retired: a call hung past sandbox.step_timeout_s"]
    store.close()


def _stored(env_id, step):
    from storage.records import EnvironmentRecord

    return EnvironmentRecord(
        env_id=env_id, skill="A", step_created=step, source="designed", passage_id="p", attempt=1, code=f"class A{step}Env: ...",
        reply="", hint="h", valid=True, reason="", checks=[], designer_sample_id="", worker_id="w", created_at=0.0,
    )


def _hung(env_id, task_id="t"):
    return PlayResult(task_id=task_id, worker_id="w", env_id=env_id, arm="no_hint", seed=0, status="failed", failure=HANG,
                      episode_return=0.0, turns=[], agent=make_sample(task_id, "agent", env_id, "A", "no_hint", 3),
                      tokens_generated=0, seconds=10.0)
