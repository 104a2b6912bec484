"""The designer's delayed reward (engine/designer_reward.py): the window's rewards, the memory update, and the queue
of designer samples with its restore."""

import msgspec
import pytest

from engine.protocol.config import CurriculumConfig, RewardConfig
from engine.protocol.config_loading import load_config
from engine.curriculum import ActiveEnv
from engine.designer_reward import DesignerQueue, DesignerReward, close_cut_window, close_window, designer_step, score_window, update_memory
from engine.protocol.messages import PlayResult
from storage.records import BatchEntry, BatchRecord, DesignerRewardRecord, EnvironmentRecord, MemoryRecord, RunState, TrajectoryRecord
from storage.store import Store, trajectory_key
from tests.engine.builders import design_trajectory, make_sample

K = 2


def _env(env_id, skill, *, valid=True, step=0, source="designed"):
    return EnvironmentRecord(
        env_id=env_id, skill=skill, step_created=step, source=source, passage_id="p", attempt=0, code="class XEnv: ...",
        reply="", hint="h", valid=valid, reason="", checks=[], designer_sample_id=f"d-{env_id}", worker_id="w", created_at=0.0,
    )


def _play(sample_id, env_id, skill, arm, step, episode_return, status="completed"):
    return TrajectoryRecord(
        sample_id=sample_id, role="agent", env_id=env_id, skill=skill, arm=arm, step=step, seed=0, status=status,
        failure="", episode_return=episode_return, turns=[], sample=make_sample(sample_id, "agent", env_id, skill, arm, step), created_at=0.0,
    )


@pytest.fixture
def store(tmp_path):
    """Environments made at step 0 (k = 2): e1 and e2 of skill A, e3 alone in skill B, and a rejected one."""
    store = Store.open(tmp_path / "store")
    returns = {  # (env, step, arm): returns of its plays
        ("e1", 0, "hint"): [1.0, 1.0], ("e1", 0, "no_hint"): [0.0, 1.0],
        ("e1", 1, "hint"): [1.0, 0.0], ("e1", 1, "no_hint"): [0.0, 0.0],
        ("e2", 0, "hint"): [0.0, 0.0], ("e2", 0, "no_hint"): [0.0, 0.0],
        ("e2", 1, "hint"): [1.0, 1.0], ("e2", 1, "no_hint"): [1.0, 0.0],
        ("e3", 0, "hint"): [1.0, 1.0], ("e3", 0, "no_hint"): [0.0, 0.0],
        ("e3", 1, "hint"): [1.0, 1.0], ("e3", 1, "no_hint"): [0.0, 0.0],
    }
    skills = {"e1": "A", "e2": "A", "e3": "B", "bad": "A"}
    with store.batch() as batch:
        for env_id, skill in skills.items():
            batch.put_environment(_env(env_id, skill, valid=env_id != "bad"))
            batch.put_trajectory(design_trajectory(env_id, skill))
        for (env_id, step, arm), values in returns.items():
            for i, value in enumerate(values):
                batch.put_trajectory(_play(f"{env_id}-{step}-{arm}-{i}", env_id, skills[env_id], arm, step, value))
        # a failed play is not a return of 1.0, and an environment of a later refresh is not in this window
        batch.put_trajectory(_play("e1-failed", "e1", "A", "no_hint", 0, 1.0, status="failed"))
        batch.put_environment(_env("later", "A", step=2))
        batch.put_environment(_env("ghost", "A"))  # valid, made at step 0, never played (an interrupted refresh)
    yield store
    store.close()


def test_window_closes_only_k_steps_after_a_refresh(store):
    assert close_window(store, RewardConfig(), K, 0, 8) == []  # env_step -1
    assert close_window(store, RewardConfig(), K, 2, 8) == []  # env_step 1 is no refresh step
    assert list(store.designer_rewards()) == []


def test_regret_over_the_window_centred_per_skill(store):
    config = RewardConfig(designer_reward="regret")
    rewards = {r.record.env_id: r for r in close_window(store, config, K, 1, 8)}
    assert set(rewards) == {"e1", "e2", "e3"}  # valid designs of step 0 that were played
    # regret = mean hinted - mean unhinted return over steps 0 and 1 (the failed play is left out)
    assert rewards["e1"].record.regret == pytest.approx(3 / 4 - 1 / 4)
    assert rewards["e2"].record.regret == pytest.approx(2 / 4 - 1 / 4)
    assert rewards["e3"].record.regret == pytest.approx(1.0)
    assert rewards["e1"].record.win_rate == pytest.approx(1 / 4)
    scale = min(8 / 3 * K, 50.0)
    assert rewards["e1"].record.advantage == pytest.approx((0.5 - 0.375) * scale)
    assert rewards["e2"].record.advantage == pytest.approx((0.25 - 0.375) * scale)
    assert rewards["e3"].record.advantage == 0.0  # alone in its skill
    for r in rewards.values():
        assert (r.record.env_step, r.record.reward_step) == (0, K)
        assert r.sample.sample_id == f"d-{r.record.env_id}"
        assert (r.sample.reward, r.sample.advantage) == (r.record.raw_reward, r.record.advantage)
    assert {r.env_id for r in store.designer_rewards()} == {"e1", "e2", "e3"}


def test_blend_uses_the_refresh_steps_regret_and_the_windows_win_rate(store):
    rewards = {r.record.env_id: r.record for r in close_window(store, RewardConfig(), K, 1, 8)}
    e1 = rewards["e1"]
    assert e1.regret == pytest.approx(1.0 - 0.5)  # step 0 only ("matched timing")
    assert (e1.hint_return, e1.no_hint_return) == (1.0, 0.5)
    # 0.4 * clip(0.5 / 0.15, 0, 1) + 0.6 * plateau(0.25), plateau ramping to 0 over 0.25 below 0.4
    assert e1.raw_reward == pytest.approx(0.4 + 0.6 * (1 - 0.15 / 0.25))


def test_a_window_cut_by_the_runs_end_is_rewarded_over_the_steps_played(store):
    """A run of 1 step at k = 2: the refresh's designs are rewarded over step 0 alone, due at step 1 (the flush)."""
    assert close_window(store, RewardConfig(), K, 1, 8, cut=True) == []  # the window ending at step 1 is whole
    rewards = {r.record.env_id: r for r in close_window(store, RewardConfig(designer_reward="regret"), K, 0, 8, cut=True)}
    assert set(rewards) == {"e1", "e2", "e3"}
    e1 = rewards["e1"].record
    assert (e1.env_step, e1.reward_step) == (0, 1)
    assert (e1.regret, e1.win_rate) == (pytest.approx(1.0 - 0.5), pytest.approx(0.5))  # step 1's plays are not read
    assert rewards["e2"].record.regret == 0.0 and rewards["e3"].record.regret == 1.0
    assert rewards["e1"].record.advantage == pytest.approx((0.5 - 0.25) * min(8 / 3 * K, 50.0))  # the scale keeps k
    assert rewards["e1"].sample.advantage == rewards["e1"].record.advantage
    # rewarded once: not again at the end of a resumed run, nor when an extended run plays the rest of the window
    assert close_window(store, RewardConfig(), K, 0, 8, cut=True) == []
    assert close_window(store, RewardConfig(), K, 1, 8) == []
    assert {r.reward_step for r in store.designer_rewards()} == {1}


def test_close_cut_window_queues_the_designs_for_the_final_flush(store):
    config = load_config(overrides=["curriculum.refresh_interval=2"])
    queue = DesignerQueue()
    assert close_cut_window(store, config, queue, 1, 8) == 0 and not queue.due  # whole: closed by designer_step
    assert close_cut_window(store, config, queue, 0, 8) == 3
    assert sorted(s.sample_id for s in queue.pop(1)) == ["d-e1", "d-e2", "d-e3"]


def test_untrained_designer_still_gets_its_record(store):
    rewards = close_window(store, RewardConfig(train_designer=False), K, 1, 8)
    assert len(rewards) == 3 and all(r.sample is None for r in rewards)


def _result(env_id, arm, episode_return, status="completed"):
    sample = make_sample(f"{env_id}-{arm}", "agent", env_id, "A", arm, 0)
    return PlayResult(
        task_id="t", worker_id="w", env_id=env_id, arm=arm, seed=0, status=status, failure="", episode_return=episode_return,
        turns=[], agent=sample, tokens_generated=1, seconds=0.0,
    )


def test_memory_records_the_environments_made_now_and_evicts(tmp_path):
    store = Store.open(tmp_path / "store")
    with store.batch() as batch:
        for i in range(2):
            batch.put_memory(MemoryRecord(env_id=f"old{i}", skill="A", name="OldEnv", code="", win_rate=0.5, regret=0.0, step=i, source="designed"))
    active = [
        ActiveEnv(env_id="new", skill="A", code="x" * 50, hint="h", designed_now=True, class_name="NewEnv"),
        ActiveEnv(env_id="reused", skill="A", code="", hint="h", designed_now=False, class_name="ReusedEnv"),
    ]
    plays = [_result("new", "no_hint", 1.0), _result("new", "no_hint", 0.0), _result("new", "no_hint", 1.0, status="failed"),
             _result("new", "hint", 1.0), _result("reused", "no_hint", 1.0)]
    update_memory(store, CurriculumConfig(memory_capacity=2, example_code_chars=10), 4, active, plays)
    memory = {m.env_id: m for m in store.memory()}
    assert set(memory) == {"old1", "new"}  # capacity 2: the oldest designed record goes; a reused env is not added
    new = memory["new"]
    assert (new.win_rate, new.regret, new.step, new.name, new.code) == (0.5, 0.5, 4, "NewEnv", "x" * 10)
    store.close()


def test_no_hint_means_regret_zero_and_a_hung_call_means_the_penalty(store):
    with store.batch() as batch:
        batch.put_environment(msgspec.structs.replace(_env("e4", "B"), hint=""))  # every hint call failed
        batch.put_trajectory(design_trajectory("e4", "B"))
        for i, value in enumerate([1.0, 0.0]):
            batch.put_trajectory(_play(f"e4-0-{i}", "e4", "B", "no_hint", 0, value))
        hung = _play("e3-hung", "e3", "B", "no_hint", 1, 0.0, status="failed")
        batch.put_trajectory(msgspec.structs.replace(hung, failure="timeout: the call took longer than 10 s"))
    rewards = {r.record.env_id: r.record for r in close_window(store, RewardConfig(), K, 1, 8)}
    assert rewards["e4"].regret == 0.0 and rewards["e4"].hint_return == rewards["e4"].no_hint_return == 0.5
    assert rewards["e3"].raw_reward == -0.5  # the default applies the hang penalty to the blend too
    reference = {r.record.env_id: r.record for r in close_window(store, RewardConfig(hang_penalty_every_variant=False), K, 1, 8)}
    assert reference["e3"].raw_reward > 0  # the reference's blend recompute ignores the hang


def test_learning_progress_reads_the_earlier_windows_from_the_store(store):
    config = RewardConfig(designer_reward="learning_progress")
    first = {r.record.env_id: r.record for r in close_window(store, config, K, 1, 8)}
    # window win rates (mean return of the unhinted plays of steps 0-1): e1 1/4, e2 1/4, e3 0; skill A's EMA starts
    # at their mean 0.25, so both A environments are at distance 0; e3 alone in B likewise
    assert {e: (r.win_rate, r.raw_reward) for e, r in first.items()} == {"e1": (0.25, 0.0), "e2": (0.25, 0.0), "e3": (0.0, 0.0)}
    with store.batch() as batch:  # a second refresh at step 2 with one environment of skill A that always wins
        batch.put_environment(_env("n1", "A", step=2))
        batch.put_trajectory(design_trajectory("n1", "A", step=2))
        for step in (2, 3):
            for i in range(2):
                batch.put_trajectory(_play(f"n1-{step}-{i}", "n1", "A", "no_hint", step, 1.0))
    (second,) = close_window(store, config, K, 3, 8)
    mu = 0.15 * 0.25 + 0.85 * 1.0  # updated with this window's mean before it is read
    assert second.record.win_rate == 1.0 and second.record.raw_reward == pytest.approx(1.0 - mu)


def test_the_default_preset_gives_two_valid_designs_of_one_skill_a_non_zero_designer_advantage(tmp_path):
    """Two designs share a skill at every refresh of the default preset, so the per-skill centring leaves a signal
    when their regrets differ (with one design a skill, as before, every designer advantage was 0)."""
    from engine.protocol.config_loading import load_config
    from engine.curriculum import active_skills, slot_skills

    config = load_config(preset="default")
    c = config.curriculum
    for refresh in range(6):
        skills = slot_skills(active_skills(c.skills, c.skills_per_refresh, refresh), c.envs_per_step)
        assert all(skills.count(s) >= 2 for s in skills), skills
    store = Store.open(tmp_path / "store")
    k = c.refresh_interval
    returns = {"e1": ([1.0, 1.0], [0.0, 1.0]), "e2": ([0.0, 0.0], [0.0, 0.0])}  # (hinted, unhinted): regret 0.5 and 0
    with store.batch() as batch:
        for env_id, (hinted, unhinted) in returns.items():
            batch.put_environment(_env(env_id, "A"))
            batch.put_trajectory(design_trajectory(env_id, "A"))
            for step in range(k):
                for arm, values in (("hint", hinted if step == 0 else []), ("no_hint", unhinted)):
                    for i, value in enumerate(values):
                        batch.put_trajectory(_play(f"{env_id}-{step}-{arm}-{i}", env_id, "A", arm, step, value))
    rewards = {r.record.env_id: r for r in close_window(store, config.reward, k, k - 1, 16)}
    assert rewards["e1"].record.regret == pytest.approx(0.5) and rewards["e2"].record.regret == 0.0
    assert rewards["e1"].sample.advantage > 0 > rewards["e2"].sample.advantage
    assert rewards["e1"].sample.advantage == pytest.approx(-rewards["e2"].sample.advantage)
    store.close()


def test_a_windows_rewards_are_a_pure_function_of_plain_inputs():
    """What the rescore calls (engine/tools/rescore.py): no store, plays as any objects with the play fields."""
    from types import SimpleNamespace

    def play(env_id, step, arm, value, status="completed"):
        return SimpleNamespace(env_id=env_id, arm=arm, status=status, failure="", episode_return=value, step=step)

    plays = {0: [play("e1", 0, "hint", 1.0), play("e1", 0, "no_hint", 0.0), play("e2", 0, "no_hint", 0.0), play("e2", 0, "hint", 0.0)],
             1: [play("e1", 1, "no_hint", 1.0), play("e2", 1, "no_hint", 0.0, status="failed")]}
    envs = [_env("e1", "A"), _env("e2", "A"), _env("ghost", "A")]  # ghost: never played, earns nothing
    score = score_window(RewardConfig(designer_reward="regret"), K, 0, envs, plays, [], 8)
    assert [d.env.env_id for d in score.designs] == ["e1", "e2"]
    e1, e2 = score.designs
    assert (e1.regret, e1.hint_return, e1.no_hint_return) == (pytest.approx(1.0 - 0.5), 1.0, 0.0)
    assert e2.regret == 0.0 and e1.advantage == pytest.approx(-e2.advantage) and e1.advantage > 0
    assert score.scale == pytest.approx(min(8 / 2 * K, 50.0))
    assert score.history == [(0, "A", pytest.approx(0.5)), (0, "A", 0.0)]  # for the learning progress of later windows
    assert score_window(RewardConfig(), K, 0, envs, plays, [], 8) == score_window(RewardConfig(), K, 0, envs, plays, [], 8)
    assert score_window(RewardConfig(), K, 2, envs, plays, [], 8).designs == []  # nothing played at step 2


def test_the_designer_stage_queues_the_rewards_and_remembers_after_a_refresh_step(store):
    config = load_config(overrides=["curriculum.refresh_interval=2"])
    queue = DesignerQueue()
    made = [ActiveEnv.of(store.environment("e1"), designed_now=True)]
    designer_step(store, config, queue, 0, 8, made, [])  # a refresh step: memory, but no window closes
    assert not queue.due and [m.env_id for m in store.memory()] == ["e1"]
    designer_step(store, config, queue, 1, 8, made, [])  # the window of step 0 closes: due at 2; no memory update
    assert [s.sample_id for s in queue.pop(2)] == ["d-e1", "d-e2", "d-e3"]
    assert [m.env_id for m in store.memory()] == ["e1"] and {r.env_id for r in store.designer_rewards()} == {"e1", "e2", "e3"}


# --- the queue of designer samples waiting for their reward step


def _record(env_id, env_step, reward_step, raw_reward=0.7, advantage=0.1):
    return DesignerRewardRecord(
        env_id=env_id, skill="A", designer_sample_id=f"d-{env_id}", env_step=env_step, reward_step=reward_step, variant="blend",
        regret=0.5, win_rate=0.5, raw_reward=raw_reward, advantage=advantage, hint_return=1.0, no_hint_return=0.5,
    )


def _reward(env_id, env_step, reward_step, trained=True):
    record = _record(env_id, env_step, reward_step)
    sample = make_sample(f"d-{env_id}", "designer", env_id, "A", "design", env_step) if trained else None
    if sample is not None:
        sample = msgspec.structs.replace(sample, reward=record.raw_reward, advantage=record.advantage)
    return DesignerReward(record=record, sample=sample)


def test_samples_wait_for_their_reward_step_and_leave_when_popped():
    queue = DesignerQueue()
    assert not queue.waiting(2) and queue.pop(2) == []
    first, second, later = _reward("e1", 0, 2), _reward("e2", 0, 2), _reward("e3", 2, 4)
    queue.add([first, second, later])
    assert queue.waiting(2) and queue.waiting(4) and not queue.waiting(3)
    assert queue.pop(3) == []
    assert queue.pop(2) == [first.sample, second.sample]
    assert not queue.waiting(2) and queue.pop(2) == []  # popped once
    queue.add([_reward("e4", 2, 4)])
    assert [s.sample_id for s in queue.pop(4)] == ["d-e3", "d-e4"]
    assert not queue.waiting(4)


def test_rewards_without_a_sample_are_not_queued():
    """An untrained designer (reward.train_designer = false) still has its reward records, but nothing to train."""
    queue = DesignerQueue()
    queue.add([_reward("e1", 0, 2, trained=False), _reward("e2", 0, 2, trained=False)])
    assert not queue.waiting(2) and queue.pop(2) == []
    queue.add([_reward("e3", 0, 2, trained=False), _reward("e4", 0, 2)])
    assert [s.sample_id for s in queue.pop(2)] == ["d-e4"]


def _store(tmp_path):
    """k = 2, 3 steps committed: rewards due at 3 (one of them already trained, one whose trajectory is gone) and
    one due at 4, computed by the uncommitted step 3."""
    store = Store.open(tmp_path / "store")
    with store.batch() as batch:
        for env_id, env_step, reward_step in (("e0", 1, 3), ("e1", 2, 3), ("e2", 2, 3), ("e3", 3, 4)):
            batch.put_trajectory(design_trajectory(env_id, "A", step=env_step))
            batch.put_designer_reward(_record(env_id, env_step, reward_step, raw_reward=0.25 * (1 + int(env_id[1])), advantage=-0.5))
        batch.put_designer_reward(_record("gone", 2, 3))  # its designer trajectory is not in the store
        batch.put_batch(BatchRecord(version=0, step=2, checkpoint=False, entries=[BatchEntry(trajectory_key(2, "d-e2"), 0.1, 0.7)]))
    return store


def test_restore_brings_back_the_samples_due_next_that_no_batch_trained(tmp_path):
    store = _store(tmp_path)
    queue = DesignerQueue()
    queue.restore(store, RunState(steps_done=3, batches=1), train_designer=True)
    assert queue.waiting(3) and not queue.waiting(4)
    due = queue.pop(3)
    assert [s.sample_id for s in due] == ["d-e0", "d-e1"]
    # the reward and advantage come from the reward records, not the stored trajectory (which has reward 0)
    assert [(s.reward, s.advantage) for s in due] == [(0.25, -0.5), (0.5, -0.5)]
    assert [s.step for s in due] == [1, 2]
    store.close()


def test_restore_of_an_untrained_designer_queues_nothing(tmp_path):
    store = _store(tmp_path)
    queue = DesignerQueue()
    queue.restore(store, RunState(steps_done=3, batches=1), train_designer=False)
    assert not queue.waiting(3) and queue.pop(3) == []
    store.close()


def test_restore_at_a_step_with_nothing_due_queues_nothing(tmp_path):
    store = _store(tmp_path)
    queue = DesignerQueue()
    queue.restore(store, RunState(steps_done=2, batches=1), train_designer=True)
    assert not any(queue.waiting(step) for step in range(6))
    store.close()
