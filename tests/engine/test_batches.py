"""Training batches (engine/batches.py): agent advantages, the stale drop, the step's batch, its record and read-back."""

import math

import msgspec
import pytest

from engine.batches import MissingTrajectory, agent_samples, batch_record, drop_stale, step_batch, stored_batch_samples
from engine.protocol.errors import InputError
from engine.protocol.messages import PlayResult, Sample, pack_floats, pack_ints, pack_mask
from storage.records import BatchEntry, BatchRecord, TrajectoryRecord
from storage.store import Store, trajectory_key
from tests.engine.builders import make_sample


def _play(sample_id, env_id, arm, episode_return, status="completed"):
    return PlayResult(
        task_id=sample_id, worker_id="w", env_id=env_id, arm=arm, seed=0, status=status, failure="", episode_return=episode_return,
        turns=[], agent=make_sample(sample_id, "agent", env_id, "A", arm, 0), tokens_generated=1, seconds=0.0,
    )


def test_agent_advantages_are_z_scores_within_each_env_and_arm_group():
    plays = [
        _play("a-nh-0", "a", "no_hint", 1.0),
        _play("b-h-0", "b", "hint", 1.0),
        _play("a-nh-1", "a", "no_hint", 0.0),
        _play("a-nh-x", "a", "no_hint", 1.0, status="failed"),  # not a sample, not a return in its group
        _play("b-h-1", "b", "hint", 0.0),
        _play("a-nh-2", "a", "no_hint", 0.0),
        _play("a-h-0", "a", "hint", 1.0),  # alone: zero variance
        _play("b-nh-0", "b", "no_hint", 0.5),
        _play("b-nh-1", "b", "no_hint", 0.5),  # equal: zero variance
        _play("c-nh-x", "c", "no_hint", 1.0, status="failed"),  # a group of failed plays only is no group
    ]
    samples, zero_groups = agent_samples(plays)
    # grouped in the order each group first appears, plays in their order within it
    assert [s.sample_id for s in samples] == ["a-nh-0", "a-nh-1", "a-nh-2", "b-h-0", "b-h-1", "a-h-0", "b-nh-0", "b-nh-1"]
    advantages = {s.sample_id: s.advantage for s in samples}
    # a/no_hint returns [1, 0, 0]: mean 1/3, std sqrt(2)/3, so z = sqrt(2) and -1/sqrt(2)
    assert advantages["a-nh-0"] == pytest.approx(math.sqrt(2))
    assert advantages["a-nh-1"] == advantages["a-nh-2"] == pytest.approx(-1 / math.sqrt(2))
    # b/hint returns [1, 0]: mean 1/2, std 1/2
    assert (advantages["b-h-0"], advantages["b-h-1"]) == (pytest.approx(1.0), pytest.approx(-1.0))
    assert advantages["a-h-0"] == advantages["b-nh-0"] == advantages["b-nh-1"] == 0.0
    assert zero_groups == 2
    # only the advantage changes: the sample is the play's own otherwise
    by_id = {p.agent.sample_id: p.agent for p in plays}
    assert all(msgspec.structs.replace(s, advantage=0.0) == by_id[s.sample_id] for s in samples)


def test_no_plays_give_no_samples():
    assert agent_samples([]) == ([], 0)
    assert agent_samples([_play("x", "a", "no_hint", 1.0, status="failed")]) == ([], 0)


def test_a_steps_batch_is_its_fresh_agent_samples_and_the_designer_samples_due():
    """The hinted plays train only with `play.train_hint_plays`; a sample older than the bound is dropped and counted;
    the groups are counted before the drop."""
    plays = [_play("n0", "a", "no_hint", 1.0), _play("n1", "a", "no_hint", 0.0), _play("h0", "a", "hint", 1.0), _play("h1", "a", "hint", 0.0)]
    due = [make_sample("d", "designer", "a", "A", "design", 0)]
    batch = step_batch(plays, due, train_hint=False, trained_at=0, bound=0)
    assert [s.sample_id for s in batch.samples] == ["n0", "n1", "d"] and batch.designer == due
    assert (batch.agent_groups, batch.zero_variance_groups, batch.dropped_stale) == (1, 0, 0)
    with_hints = step_batch(plays, [], train_hint=True, trained_at=0, bound=0)
    assert [s.sample_id for s in with_hints.agent] == ["n0", "n1", "h0", "h1"] and with_hints.agent_groups == 2
    stale = step_batch(plays, due, train_hint=True, trained_at=5, bound=2)  # sampled by version 0, trained by 5
    assert (stale.agent, stale.designer, stale.agent_groups, stale.dropped_stale) == ([], due, 2, 4)


def _sampled(versions, role="agent", mask=None):
    return Sample(
        sample_id=f"{role}-{versions}", role=role, env_id="e", skill="A", arm="no_hint", step=0,
        tokens=pack_ints(list(range(len(versions)))), loss_mask=pack_mask(mask if mask is not None else [int(v >= 0) for v in versions]),
        logprobs=pack_floats([0.0] * len(versions)), versions=pack_ints(versions), reward=0.0,
    )


def test_drop_stale_edge_cases():
    assert drop_stale([], trained_at=5, bound=1) == ([], 0)
    nothing_sampled = _sampled([-1, -1])  # no sampled token: no version to be stale by
    assert drop_stale([nothing_sampled], trained_at=9, bound=0) == ([nothing_sampled], 0)
    # the prompt's -1 entries are not "version -1": only sampled tokens count
    at_bound = _sampled([-1, 3, -1, 4])
    assert drop_stale([at_bound], trained_at=4, bound=1) == ([at_bound], 0)
    assert drop_stale([at_bound], trained_at=5, bound=1) == ([], 1)


def test_a_trained_token_without_a_version_is_stale_at_any_age():
    """The issue's reproduction: versions [-1, -1, -1, -1] with mask [0, 1, 1, 1] survived at trained_at 9, bound 4."""
    unversioned = _sampled([-1, -1, -1, -1], mask=[0, 1, 1, 1])
    assert drop_stale([unversioned], trained_at=9, bound=4) == ([], 1)
    assert drop_stale([unversioned], trained_at=0, bound=0) == ([], 1)
    partly = _sampled([-1, 8, -1, 9], mask=[0, 1, 1, 1])  # fresh, but one trained token has no version
    assert drop_stale([partly], trained_at=9, bound=4) == ([], 1)
    designer = _sampled([-1, -1, -1], role="designer", mask=[0, 1, 1])  # late by design, but never unversioned
    late_designer = _sampled([-1, 1, 1], role="designer")
    assert drop_stale([designer, late_designer], trained_at=9, bound=4) == ([late_designer], 1)


def _trajectory(sample):
    return TrajectoryRecord(
        sample_id=sample.sample_id, role=sample.role, env_id=sample.env_id, skill=sample.skill, arm=sample.arm, step=sample.step,
        seed=0, status="completed", failure="", episode_return=1.0, turns=[], sample=sample, created_at=0.0,
    )


def test_a_recorded_batch_reads_back_with_the_advantages_and_rewards_it_trained_with(tmp_path):
    store = Store.open(tmp_path / "store")
    agent = make_sample("p0", "agent", "e1", "A", "no_hint", 3)
    designer = make_sample("d-e1", "designer", "e1", "A", "design", 2)
    with store.batch() as batch:  # stored as played: advantage 0, and the designer's reward not yet known
        batch.put_trajectory(_trajectory(agent))
        batch.put_trajectory(_trajectory(designer))
    trained = [msgspec.structs.replace(agent, advantage=1.5), msgspec.structs.replace(designer, reward=0.7, advantage=-0.25)]
    record = batch_record(4, 3, trained, checkpoint=True)
    assert (record.version, record.step, record.checkpoint) == (4, 3, True)
    assert record.entries == [BatchEntry(trajectory_key(3, "p0"), 1.5, 0.0), BatchEntry(trajectory_key(2, "d-e1"), -0.25, 0.7)]
    with store.batch() as batch:
        batch.put_batch(record)
    [stored] = list(store.batches())
    assert stored_batch_samples(store, stored) == trained
    # the entry, not the trajectory, says what the batch trained with
    edited = BatchRecord(version=5, step=3, checkpoint=False, entries=[BatchEntry(trajectory_key(3, "p0"), -2.0, 0.25)])
    [sample] = stored_batch_samples(store, edited)
    assert (sample.advantage, sample.reward) == (-2.0, 0.25)
    assert msgspec.structs.replace(sample, advantage=0.0, reward=0.0) == agent
    store.close()


def test_a_batch_naming_a_missing_trajectory_is_a_damaged_store(tmp_path):
    store = Store.open(tmp_path / "store")
    record = BatchRecord(version=2, step=1, checkpoint=False, entries=[BatchEntry(trajectory_key(1, "gone"), 0.0, 0.0)])
    with pytest.raises(MissingTrajectory, match="00000001/gone") as caught:
        stored_batch_samples(store, record)
    assert isinstance(caught.value, InputError)
    assert "batch 2" in str(caught.value)
    assert stored_batch_samples(store, BatchRecord(version=0, step=0, checkpoint=False, entries=[])) == []
    store.close()


def test_hinted_plays_give_no_agent_sample_unless_asked():
    """The reference's agent batch is the unhinted plays; `play.train_hint_plays` adds the hinted ones."""
    plays = [_play("a-nh-0", "a", "no_hint", 1.0), _play("a-h-0", "a", "hint", 1.0), _play("a-nh-1", "a", "no_hint", 0.0),
             _play("a-h-1", "a", "hint", 0.0)]
    samples, zero_groups = agent_samples(plays, train_hint=False)
    assert [s.sample_id for s in samples] == ["a-nh-0", "a-nh-1"] and zero_groups == 0
    assert [s.arm for s in agent_samples(plays, train_hint=True)[0]] == ["no_hint", "no_hint", "hint", "hint"]
