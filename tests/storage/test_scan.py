"""Tolerant scans: a record that does not decode is set aside, named by database and key; the scan goes on."""

from __future__ import annotations

from engine.protocol.messages import Sample, pack_floats, pack_ints, pack_mask
from storage.records import RunState, StoredRecordError, TrajectoryRecord
from storage.scan import describe_skipped, tolerant, tolerant_get, trajectories
from storage.store import Store, trajectory_key, trajectory_prefix


def _trajectory(sample_id: str, step: int) -> TrajectoryRecord:
    sample = Sample(sample_id=sample_id, role="agent", env_id="e", skill="s", arm="no_hint", step=step, tokens=pack_ints([1]), loss_mask=pack_mask([1]),
                    logprobs=pack_floats([0.0]), versions=pack_ints([0]), reward=0.0)
    return TrajectoryRecord(sample_id=sample_id, role="agent", env_id="e", skill="s", arm="no_hint", step=step, seed=0, status="completed",
                            failure="", episode_return=0.0, turns=[], sample=sample, created_at=0.0)


def test_bad_records_are_skipped_and_named(tmp_path):
    store = Store.open(tmp_path / "store")
    with store.batch() as batch:
        for i, step in enumerate((0, 0, 1)):
            batch.put_trajectory(_trajectory(f"t{i}", step))
    with store._env.begin(write=True) as txn:
        txn.put(b"00000000/t0x", b"\xc1", db=store._dbs["trajectories"])  # between t0 and t1: the scan must go on past it
    skipped: list[StoredRecordError] = []
    assert [t.sample_id for t in tolerant(store, "trajectories", skipped)] == ["t0", "t1", "t2"]
    assert len(skipped) == 1 and str(skipped[0]).startswith("record '00000000/t0x' in database 'trajectories' is corrupt")
    assert [t.sample_id for t in trajectories(store, [], step=1)] == ["t2"]
    later: list[StoredRecordError] = []
    assert tolerant_get(store, "trajectories", "00000000/t0x", later) is None and len(later) == 1
    assert tolerant_get(store, "trajectories", "00000009/none", later) is None and len(later) == 1
    store.close()
    assert describe_skipped(skipped * 7, limit=5)[-1] == "warning: skipped 2 more bad records"


def test_a_step_scan_takes_that_step_only(tmp_path):
    assert trajectory_key(3, "a") == trajectory_prefix(3) + "a" == "00000003/a"
    store = Store.open(tmp_path / "store")
    with store.batch() as batch:
        for i, step in enumerate((1, 10, 1)):
            batch.put_trajectory(_trajectory(f"t{i}", step))
    assert [t.sample_id for t in trajectories(store, [], step=1)] == ["t0", "t2"]
    assert [t.sample_id for t in store.trajectories(10)] == ["t1"]
    assert store.trajectory(trajectory_key(10, "t1")).step == 10
    store.close()


def test_check_records_names_a_record_under_a_scrambled_key_and_a_missing_run_state(tmp_path):
    """A scrambled key hides a record from every scan by step or id (a damaged run would read as an empty one):
    each record must sit under the key its own fields give, and the run state must be there."""
    from storage.scan import check_records, damage_line

    store = Store.open(tmp_path / "store")
    try:
        with store.batch() as batch:
            batch.put_trajectory(_trajectory("a", 3))
            batch.put_state(RunState(steps_done=4))
        assert check_records(store) == []
        with store._env.begin(write=True) as txn:
            value = txn.get(b"00000003/a", db=store._dbs["trajectories"])
            txn.delete(b"00000003/a", db=store._dbs["trajectories"])
            txn.put(b"0\x1a000003/a", value, db=store._dbs["trajectories"])
            txn.delete(b"state", db=store._dbs["meta"])
        problems = [str(p) for p in check_records(store)]
        assert len(problems) == 2, problems
        assert "in database 'trajectories' is under the wrong key (its fields say '00000003/a') (step 3)" in problems[0]
        assert "the run state (database 'meta', key 'state') is missing" in problems[1]
        line = damage_line(store.path, check_records(store))
        assert "\n" not in line and line.startswith(f"{store.path}: 2 damaged records (and 1 more), the first: record ")
    finally:
        store.close()
