"""The LMDB store: batched writes and scans, committed versus lost batches, read-only opening and a full disk."""

import pytest

from engine.protocol.messages import Sample, pack_floats, pack_ints, pack_mask
from storage.memory import evicted, negative_lines, positive_examples
from storage.records import MemoryRecord, RunState, StoredRecordError, TrajectoryRecord
from storage.store import Store


def _sample(sample_id="x", step=0):
    return Sample(
        sample_id=sample_id, role="agent", env_id="e", skill="s", arm="hint", step=step,
        tokens=pack_ints([1, 2, 3]), loss_mask=pack_mask([0, 1, 1]), logprobs=pack_floats([0, -1, -2]), versions=pack_ints([-1, 0, 0]), reward=1.0,
    )


def _trajectory(sample_id, step):
    return TrajectoryRecord(
        sample_id=sample_id, role="agent", env_id="e", skill="s", arm="hint", step=step, seed=1, status="completed",
        failure="", episode_return=1.0, turns=[], sample=_sample(sample_id, step), created_at=0.0,
    )


def test_batched_writes_and_scans(tmp_path):
    store = Store.open(tmp_path / "store")
    with store.batch() as batch:
        for step in range(3):
            for i in range(4):
                batch.put_trajectory(_trajectory(f"t{i}", step))
        batch.put_state(RunState(steps_done=3, policy_version=2))
    assert len(list(store.trajectories())) == 12
    assert [t.sample_id for t in store.trajectories(1)] == ["t0", "t1", "t2", "t3"]
    assert store.state().policy_version == 2
    store.close()
    reader = Store.open(tmp_path / "store", readonly=True)
    assert reader.counts()["trajectories"] == 12
    reader.close()


def test_uncommitted_batch_is_lost_committed_stays(tmp_path):
    store = Store.open(tmp_path / "store")
    with store.batch() as batch:
        batch.put_trajectory(_trajectory("kept", 0))
    with pytest.raises(RuntimeError):
        with store.batch() as batch:
            batch.put_trajectory(_trajectory("lost", 0))
            raise RuntimeError("crash inside a batch")
    assert [t.sample_id for t in store.trajectories()] == ["kept"]


def test_corrupt_record_is_reported(tmp_path):
    store = Store.open(tmp_path / "store")
    with store._env.begin(write=True) as txn:
        txn.put(b"bad", b"\x93garbage", db=store._dbs["environments"])
    with pytest.raises(StoredRecordError, match=r"^record 'bad' in database 'environments' is corrupt"):
        list(store.environments())


def test_readonly_open_of_missing_store(tmp_path):
    from engine.protocol.errors import InputError

    with pytest.raises(FileNotFoundError, match="no LMDB store") as missing:  # StoreMissing: both
        Store.open(tmp_path / "nothing", readonly=True)
    assert isinstance(missing.value, InputError)


def test_the_store_never_maps_for_writing(tmp_path):
    """No writemap: LMDB then writes with pwrite, and a full disk is an error code, not a SIGBUS on a store into
    the map (what a full tmpfs does to writemap). tests/storage/test_store_damage.py fills a real small disk."""
    store = Store.open(tmp_path / "store")
    assert store._env.flags()["writemap"] is False
    store.close()


def _memory(env_id, skill, win, regret, step=0, source="designed"):
    return MemoryRecord(env_id=env_id, skill=skill, name=f"{env_id}Env", code="class X: pass", win_rate=win, regret=regret, step=step, source=source)


def test_memory_examples_follow_the_reference():
    import random

    records = [_memory("a", "S", 0.5, 0.9), _memory("b", "S", 0.95, 0.0), _memory("c", "S", 0.05, 0.0), _memory("d", "T", 0.5, 1.0)]
    positives = positive_examples(records, "S", 2, random.Random(0), 100)
    assert [p.name for p in positives] == ["aEnv"]
    negatives = negative_lines(records, "S", 1, random.Random(0))
    assert len(negatives) == 1 and ("too easy" in negatives[0] or "too hard" in negatives[0])
    assert evicted([_memory(str(i), "S", 0.5, 0, step=i) for i in range(5)] + [_memory("seed", "S", 0.5, 0, -1, "seed")], 4) == ["0", "1"]


def test_check_sample_names_the_misaligned_array():
    import msgspec

    from engine.protocol.sample_values import check_sample

    check_sample(_sample())
    broken = msgspec.structs.replace(_sample(), logprobs=pack_floats([0.0]))
    with pytest.raises(ValueError, match=r"^sample x: logprobs has 1 entries for 3 tokens$"):
        check_sample(broken)


def test_a_full_store_says_what_to_do_and_keeps_what_was_committed(tmp_path, monkeypatch):
    import storage.store

    monkeypatch.setattr(storage.store, "MAP_SIZE", 256 << 10)
    store = Store.open(tmp_path / "store")
    with store.batch() as batch:
        batch.put_trajectory(_trajectory("kept", 0))
    big = Sample(**{**{f: getattr(_sample(), f) for f in _sample().__struct_fields__}, "tokens": pack_ints(list(range(200_000)))})
    record = TrajectoryRecord(
        sample_id="big", role="agent", env_id="e", skill="s", arm="hint", step=0, seed=1, status="completed",
        failure="", episode_return=1.0, turns=[], sample=big, created_at=0.0,
    )
    with pytest.raises(storage.store.StoreFullError, match=r"the store map is full: .* cannot grow \(.*MapFullError.*free disk space, then continue with `bin/spade-engine up --resume "):
        with store.batch() as batch:
            batch.put_trajectory(record)
    assert [t.sample_id for t in store.trajectories()] == ["kept"]
