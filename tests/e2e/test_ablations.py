"""End to end: every ablation preset runs 2 steps of `up` on the scripted backend, and does what it ablates.

Each ablation is an overlay on the default preset (so it runs on CPU; `--preset paper,NAME` is the paper-scale
one). The store is read back to check the ablation: no passage, no memory examples, no designer sample trained,
the solve-rate or learning-progress reward, two skills, a fixed pool sampled without replacement.
"""

from __future__ import annotations

import pytest

from storage.store import Store
from tests.e2e.scripted_run import DATA, up, write_script

SMALL = ("curriculum.refresh_interval=1", "curriculum.envs_per_step=2", "play.plays_per_env=2", "play.hint_plays_per_env=2",
         "run.max_staleness=0")


def _read(run_dir):
    store = Store.open(run_dir / "store", readonly=True)
    try:
        return list(store.environments()), list(store.trajectories()), list(store.designer_rewards()), list(store.batches())
    finally:
        store.close()


def _designer_prompts(tiny_model_path, trajectories) -> list[str]:
    from transformers import AutoTokenizer

    from engine.protocol.messages import unpack_ints, unpack_mask

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    prompts = []
    for t in trajectories:
        if t.role == "designer":
            ids, mask = unpack_ints(t.sample.tokens), unpack_mask(t.sample.loss_mask)
            prompts.append(tokenizer.decode(ids[mask == 0]))
    return prompts


@pytest.mark.slow  # six runs of `up`: about 2 minutes on 2 idle cores (bin/test -m slow)
@pytest.mark.parametrize("preset", ["no-corpus", "no-memory", "frozen-designer", "solve-rate", "learning-progress", "two-skills"])
def test_each_ablation_preset_runs_two_steps(tiny_model_path, tmp_path, preset):
    run_dir = tmp_path / "run"
    up(tiny_model_path, run_dir, write_script(tmp_path), steps=2, preset=preset, sets=SMALL)
    envs, trajectories, rewards, batches = _read(run_dir)
    designed = [e for e in envs if e.source == "designed"]
    assert designed and all(e.valid for e in designed)
    assert {t.step for t in trajectories if t.role == "agent"} == {0, 1}
    prompts = _designer_prompts(tiny_model_path, trajectories)
    trained = {e.trajectory_key.split("/", 1)[1] for b in batches for e in b.entries}
    designer_ids = {t.sample_id for t in trajectories if t.role == "designer"}
    if preset == "no-corpus":
        assert all(e.passage_id == "" for e in designed)
        assert prompts and all("<REFERENCE_DOCUMENT>" not in p and "Ideas to start from" in p for p in prompts)
    elif preset == "no-memory":
        assert prompts and all("<REFERENCE_ENVIRONMENTS>" not in p and "Avoid generating" not in p for p in prompts)
        assert all("<REFERENCE_DOCUMENT>" in p for p in prompts)
    elif preset == "frozen-designer":
        assert rewards and not trained & designer_ids  # rewarded, never trained
    else:
        assert trained & designer_ids  # the designer trains
    if preset == "solve-rate":
        # the reward is the plateau of the win rate alone: 1 inside [0.4, 0.6], ramping to 0 within 0.25 outside
        from engine.rewards import plateau

        assert rewards and all(r.raw_reward == pytest.approx(plateau(r.win_rate, 0.4, 0.6, 0.25)) for r in rewards)
    if preset == "learning-progress":
        assert rewards and {r.variant for r in rewards} == {"learning_progress"}
        assert all(r.raw_reward >= 0.0 for r in rewards)
    if preset == "two-skills":
        assert {e.skill for e in designed} == {"Mathematical Reasoning", "Pattern Recognition"}


def test_fixed_envs_samples_a_folder_of_twenty_without_replacement(tiny_model_path, tmp_path):
    pool = tmp_path / "pool"
    pool.mkdir()
    template = (DATA / "pick_env.py").read_text()
    for i in range(20):
        (pool / f"pick_{i:02d}.py").write_text(template.replace("class PickEnv", f"class Pick{i}Env"))
    run_dir = tmp_path / "run"
    sets = (*SMALL, "curriculum.envs_per_step=3", f"curriculum.fixed_envs={pool}")
    up(tiny_model_path, run_dir, write_script(tmp_path), steps=4, preset="fixed-envs", sets=sets)
    envs, trajectories, rewards, batches = _read(run_dir)
    assert not [t for t in trajectories if t.role == "designer"] and not rewards  # no designer at all
    by_step: dict[int, set[str]] = {}
    for t in trajectories:
        by_step.setdefault(t.step, set()).add(t.env_id)
    assert sorted(by_step) == [0, 1, 2, 3] and all(len(ids) == 3 for ids in by_step.values())  # 4 refreshes (k = 1)
    played = set().union(*by_step.values())
    assert len(played) == 12 > 6 and all(env_id.startswith("fixed-pick_") for env_id in played)  # none twice
    assert not [t for t in trajectories if t.arm == "hint"]  # nothing to measure a regret for
