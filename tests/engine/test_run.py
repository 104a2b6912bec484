"""The engine's resume (engine/run.py `restore`) and the stale drop at training time."""

from engine.protocol.config_loading import load_config
from engine.metrics.live import LiveView
from engine.protocol.messages import Sample
from engine.protocol.paths import RunPaths
from engine.batches import drop_stale
from engine.protocol.messages import pack_floats, pack_ints, pack_mask
from engine.run import Engine
from storage.records import (
    BatchEntry,
    BatchRecord,
    DesignerRewardRecord,
    EnvironmentRecord,
    RunState,
)
from storage.store import trajectory_key
from tests.engine.builders import design_trajectory


def _reward(env_id, env_step, reward_step):
    return DesignerRewardRecord(
        env_id=env_id, skill="A", designer_sample_id=f"d-{env_id}", env_step=env_step, reward_step=reward_step, variant="blend",
        regret=0.5, win_rate=0.5, raw_reward=0.7, advantage=0.1, hint_return=1.0, no_hint_return=0.5,
    )


def test_restore_keeps_only_the_designer_samples_due_next_and_not_yet_trained(tmp_path):
    """k = 2 and 3 steps committed: rewards due at step 3 come back; one already trained and one computed by the
    uncommitted step 3 (due at 4) do not, since playing step 3 again recomputes it."""
    paths = RunPaths(tmp_path / "run")
    config = load_config(overrides=["curriculum.refresh_interval=2"])
    engine = Engine(config, paths, [], view=LiveView(3, enabled=False))
    with engine.store.batch() as batch:
        batch.put_environment(EnvironmentRecord(
            env_id="e1", skill="A", step_created=2, source="designed", passage_id="p", attempt=0, code="class AEnv: ...",
            reply="", hint="h", valid=True, reason="", checks=[], designer_sample_id="d-e1", worker_id="w", created_at=0.0,
        ))
        for env_id, env_step, reward_step in (("e0", 1, 3), ("e1", 2, 3), ("e2", 2, 3), ("e3", 3, 4)):
            batch.put_trajectory(design_trajectory(env_id, "A", step=env_step))
            batch.put_designer_reward(_reward(env_id, env_step, reward_step))
        batch.put_batch(BatchRecord(version=0, step=2, checkpoint=False, entries=[BatchEntry(trajectory_key(2, "d-e2"), 0.1, 0.7)]))
    state = RunState(steps_done=3, batches=1, active_env_ids=["e1"], refresh_step=2)
    active = engine.restore(state)
    assert [(e.env_id, e.designed_now, e.class_name) for e in active] == [("e1", True, "AEnv")]
    assert {step: [s.sample_id for s in due] for step, due in engine.designer_queue.due.items()} == {3: ["d-e0", "d-e1"]}
    assert all((s.reward, s.advantage) == (0.7, 0.1) for s in engine.designer_queue.due[3])
    engine.store.close()


def _sampled_by(role, versions):
    mask = [0] + [1] * len(versions)
    return Sample(
        sample_id=f"{role}-{versions}", role=role, env_id="e", skill="A", arm="no_hint", step=0,
        tokens=pack_ints(list(range(len(mask)))), loss_mask=pack_mask(mask), logprobs=pack_floats([0.0] * len(mask)),
        versions=pack_ints([-1] + versions), reward=0.0,
    )


def test_samples_staler_than_the_bound_at_training_time_are_dropped_and_counted():
    """The batch trained at version 6 with bound 2: an episode whose first turn was sampled by version 3 goes,
    even though its last turn is fresh; designer samples (late by design) stay."""
    fresh, edge, spans, old = _sampled_by("agent", [6]), _sampled_by("agent", [4, 5]), _sampled_by("agent", [3, 6]), _sampled_by("agent", [1])
    designer = _sampled_by("designer", [1])
    kept, dropped = drop_stale([fresh, edge, spans, old, designer], trained_at=6, bound=2)
    assert kept == [fresh, edge, designer] and dropped == 2
    current, spans_an_update = _sampled_by("agent", [4]), _sampled_by("agent", [3, 4])
    assert drop_stale([current, spans_an_update], trained_at=4, bound=0) == ([current], 1)  # synchronous: current version only
