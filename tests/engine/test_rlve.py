"""The RLVE baseline's difficulty controller (hand-made accuracies) and its refresh: Reasoning-Gym environments at
the controller's difficulties, the plays counted from the store, the state kept across a resume."""

from __future__ import annotations

import random

from engine.protocol.config_loading import load_config
from engine.protocol.messages import Sample, decode_reasoning_gym_task
from engine.rlve import SlidingWindow, rlve_refresh
from storage.records import TrajectoryRecord
from storage.store import Store


def _feed(controller, task, difficulty, wins, plays):
    return [controller.record(task, difficulty, i < wins) for i in range(plays)]


def test_difficulty_rises_only_when_accuracy_at_the_top_passes_the_threshold():
    c = SlidingWindow(["t"], accuracy=0.9, window=128, step=4)
    assert _feed(c, "t", 0, wins=115, plays=128)[-1] is False  # 115/128 = 0.898 < 0.9: no rise, the count restarts
    assert c.state()["t"] == [0, 0, 0, 0]
    assert _feed(c, "t", 0, wins=116, plays=128)[-1] is True  # 116/128 = 0.906
    assert c.state()["t"] == [0, 1, 0, 0]
    assert not any(_feed(c, "t", 0, wins=128, plays=200))  # plays below the top difficulty do not count
    for top in range(2, 7):
        assert _feed(c, "t", top - 1, wins=128, plays=128)[-1] is True
    assert c.state()["t"][:2] == [3, 6]  # a sliding window of d_Delta = 4 difficulties: [high - 3, high]
    rng = random.Random(0)
    assert {c.sample("t", rng) for _ in range(200)} == {3, 4, 5, 6}


def test_state_round_trips_and_unknown_tasks_are_ignored():
    c = SlidingWindow(["a", "b"], accuracy=0.5, window=2, step=2)
    _feed(c, "a", 0, wins=2, plays=2)
    c.record("a", 1, True)
    c.record("zzz", 0, True)
    again = SlidingWindow(["a", "b", "c"], accuracy=0.5, window=2, step=2, state=c.state())
    assert again.state() == {"a": [0, 1, 1, 1], "b": [0, 0, 0, 0], "c": [0, 0, 0, 0]}


def _play(store, step, env_id, won, i):
    sample = Sample(sample_id=f"s{step}-{env_id}-{i}", role="agent", env_id=env_id, skill="math", arm="no_hint", step=step,
                    tokens=b"", loss_mask=b"", logprobs=b"", versions=b"", reward=float(won))
    with store.batch() as batch:
        batch.put_trajectory(TrajectoryRecord(sample_id=sample.sample_id, role="agent", env_id=env_id, skill="math",
                                              arm="no_hint", step=step, seed=0, status="completed", failure="",
                                              episode_return=float(won), turns=[], sample=sample, created_at=0.0))


def test_refresh_counts_the_plays_since_the_last_one_and_survives_a_resume(tmp_path):
    config = load_config("rlve", None, ["rlve.tasks=['chain_sum', 'gcd']", "rlve.window=2", "rlve.accuracy=0.5",
                                        "curriculum.envs_per_step=2"])
    store = Store.open(tmp_path / "store")
    try:
        first = rlve_refresh(store, config, 0)
        specs = {e.env_id: decode_reasoning_gym_task(e.code) for e in first.active}
        assert sorted(s.dataset for s in specs.values()) == ["chain_sum", "gcd"]
        assert all(s.difficulty == 0 and s.max_turns == 2 for s in specs.values())
        assert all(store.environment(e) is not None for e in specs)  # stored, so a resume restores them
        chain = next(e for e, s in specs.items() if s.dataset == "chain_sum")
        _play(store, 0, chain, True, 0)
        _play(store, 0, chain, True, 1)  # 2/2 at the top difficulty: chain_sum rises to [0, 1]
        second = rlve_refresh(store, config, 1)
        assert store.state().rlve == {"chain_sum": [0, 1, 0, 0], "gcd": [0, 0, 0, 0]}
        assert store.state().rlve_counted == 1
        again = rlve_refresh(store, config, 1)  # a resumed run repeating the refresh: the same problems, nothing counted twice
        assert [e.code for e in again.active] == [e.code for e in second.active]
        assert store.state().rlve["chain_sum"] == [0, 1, 0, 0]
    finally:
        store.close()
    reopened = Store.open(tmp_path / "store")
    try:
        assert reopened.state().rlve["chain_sum"] == [0, 1, 0, 0]
    finally:
        reopened.close()
