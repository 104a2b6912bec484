import msgspec

from engine.designer_queue import DesignerQueue
from engine.feedback import DesignerReward
from storage.records import BatchEntry, BatchRecord, DesignerRewardRecord, RunState
from storage.store import Store, trajectory_key
from tests.engine.test_feedback import _design, _sample


def _record(env_id, env_step, reward_step, raw_reward=0.7, advantage=0.1):
    return DesignerRewardRecord(
        env_id=env_id, skill="A", designer_sample_id=f"d-{env_id}", env_step=env_step, reward_step=reward_step, variant="blend",
        regret=0.5, win_rate=0.5, raw_reward=raw_reward, advantage=advantage, hint_return=1.0, no_hint_return=0.5,
    )


def _reward(env_id, env_step, reward_step, trained=True):
    record = _record(env_id, env_step, reward_step)
    sample = _sample(f"d-{env_id}", "designer", env_id, "A", "design", env_step) if trained else None
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
            batch.put_trajectory(_design(env_id, "A", step=env_step))
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
