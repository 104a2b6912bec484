from engine.protocol.config_loading import load_config
from engine.curriculum import ActiveEnv
from engine.protocol.messages import PlayResult, TaskFailed, TurnRecord
from engine.plays import play_tasks, store_plays
from storage.store import Store, trajectory_key
from tests.engine.test_feedback import _sample


def _env(env_id, skill="A"):
    return ActiveEnv(env_id=env_id, skill=skill, code=f"class {env_id.upper()}Env: ...", hint=f"hint for {env_id}",
                     designed_now=True, class_name=f"{env_id.upper()}Env")


def _config(g=3, h=2, seed=0, hint_plays="refresh"):
    return load_config(overrides=[f"play.plays_per_env={g}", f"play.hint_plays_per_env={h}", f"run.seed={seed}", f"play.hint_plays={hint_plays}"])


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


def test_task_ids_are_unique_and_name_step_env_arm_and_index():
    tasks = play_tasks(_config(g=2, h=1, hint_plays="every_step"), 7, [_env("e1")])
    assert [t.task_id for t in tasks] == ["s0007-e1-no_hint-00", "s0007-e1-no_hint-01", "s0007-e1-hint-00"]


def _result(sample_id, env_id, arm, episode_return, status="completed", seed=5):
    turn = TurnRecord(action="3", parse_rule="boxed_last", reward=episode_return, terminated=True, truncated=False,
                      policy_version=2, observation_chars=40)
    return PlayResult(
        task_id=sample_id, worker_id="w", env_id=env_id, arm=arm, seed=seed, status=status,
        failure="timeout" if status == "failed" else "", episode_return=episode_return, turns=[turn],
        agent=_sample(sample_id, "agent", env_id, "A", arm, 3), tokens_generated=4, seconds=0.5,
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
