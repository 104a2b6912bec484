"""End to end: `up --preset paper`, shrunk by `--set` to a minute on 2 cores, behaves as the reference does.

The store is read back: hinted plays happen only at refresh steps (for the environments made there), no
hinted play is in any training batch, designer samples are, the learner ran the reference's objective, and the
run was synchronous: every agent sample trains on the policy that sampled it, every designer sample k versions on.
"""

from __future__ import annotations

import tomllib

from engine.protocol.messages import unpack_ints
from storage.store import Store
from tests.e2e.scripted_run import metrics_rows, up, write_script

K = 2
SHRINK = (
    f"curriculum.refresh_interval={K}", "curriculum.envs_per_step=2", "curriculum.skills_per_refresh=2",
    "play.plays_per_env=2", "play.hint_plays_per_env=3", "play.agent_max_tokens=64", "play.designer_max_tokens=1024",
    "play.hint_max_tokens=64", "play.max_context_tokens=4096", "inference.max_batch=8", "inference.concurrency=8",
    "curriculum.max_passage_words=200",
)


def test_paper_preset_hints_only_at_refresh_steps_and_never_trains_them(tiny_model_path, tmp_path):
    run_dir = tmp_path / "run"
    up(tiny_model_path, run_dir, write_script(tmp_path), steps=4, preset="paper", sets=SHRINK,
       timeout=600)  # synchronous, as the reference: slower than a bounded run on a busy machine
    config = tomllib.loads((run_dir / "config.toml").read_text())
    assert config["learner"]["objective"]["name"] == "tis" and config["learner"]["loss_aggregation"] == "sample_mean"
    assert config["play"]["hint_plays"] == "refresh" and not config["play"]["train_hint_plays"]

    store = Store.open(run_dir / "store", readonly=True)
    trajectories = {(t.step, t.sample_id): t for t in store.trajectories()}
    batches = list(store.batches())
    envs = {e.env_id: e for e in store.environments()}
    store.close()

    agent = [t for t in trajectories.values() if t.role == "agent"]
    hinted = [t for t in agent if t.arm == "hint"]
    assert hinted and {t.step for t in agent} == {0, 1, 2, 3}
    assert {t.step for t in hinted} == {0, 2}  # refresh steps only ...
    assert all(envs[t.env_id].step_created == t.step for t in hinted)  # ... for the environments made there
    assert len(hinted) == 2 * 2 * 3  # 2 refreshes x 2 environments x 3 hinted plays

    trained = [trajectories[tuple(_split(e.trajectory_key))] for b in batches for e in b.entries]
    assert trained and not [t for t in trained if t.arm == "hint"]  # no hinted sample in any batch
    assert {t.role for t in trained} == {"agent", "designer"}
    unhinted = [t for t in agent if t.arm == "no_hint" and t.status != "failed"]
    assert len([t for t in trained if t.role == "agent"]) == len(unhinted)
    assert config["run"]["max_staleness"] == 0  # synchronous, as the reference (paper-async is the bounded one)
    for batch in batches:
        for entry in batch.entries:
            sample = trajectories[tuple(_split(entry.trajectory_key))]
            age = batch.version - min(int(v) for v in unpack_ints(sample.sample.versions) if v >= 0)
            assert age == (0 if sample.role == "agent" else K), (entry.trajectory_key, batch.version, age)

    rows = metrics_rows(run_dir)
    step_rows = [r for r in rows if "envs_requested" in r]
    assert [r["hint_plays"] for r in step_rows] == [6, 0, 6, 0]
    for r in step_rows:
        assert 0.0 <= r["learnable_share_window"] <= 1.0 and "learnable_share_budget" in r
        assert r["agent_samples"] == 4  # 2 environments x 2 unhinted plays, the hinted ones left out


def _split(key: str) -> tuple[int, str]:
    """A trajectory key (storage.store.trajectory_key) as (step, sample_id)."""
    step, sample_id = key.split("/", 1)
    return int(step), sample_id
