"""End to end on the scripted backend: edit tasks (`curriculum.edit_share`). The designer is handed a remembered
valid environment and writes a variant: new integer constants (`edit_mode = "numbers"`, the default) or the whole
code ("code"); the worker validates it in the sandbox as any design, and the store links it to its parent. A
design that reproduces an environment in memory is rejected as a duplicate."""

from __future__ import annotations

import json

import pytest

from storage.store import Store
from tests.e2e.scripted_run import DATA, up, write_script

PICK = (DATA / "pick_env.py").read_text()


def _run(tiny_model_path, tmp_path, mode: str, designer: list[str]):
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "pick_seed.py").write_text(PICK.replace("Round", "Game"))  # the parent: numbers 2 (randint(1, 2)) and 9999
    (seeds / "manifest.json").write_text(json.dumps([{"file": "pick_seed.py", "skill": "Mathematical Reasoning", "hint": "One of two."}]))
    run_dir = tmp_path / "run"
    up(tiny_model_path, run_dir, write_script(tmp_path, designer=designer), steps=2, sets=(
        f"curriculum.seeds={json.dumps(str(seeds))}", "curriculum.edit_share=1", f"curriculum.edit_mode={json.dumps(mode)}",
        'curriculum.skills=["Mathematical Reasoning"]', "curriculum.skills_per_refresh=1", "curriculum.envs_per_step=2",
        "curriculum.refresh_interval=1", "run.max_staleness=0", "play.plays_per_env=2", "play.hint_plays_per_env=2",
    ))
    store = Store.open(run_dir / "store", readonly=True)
    try:
        envs = {e.env_id: e for e in store.environments()}
        designers = {t.sample_id: t.sample for t in store.trajectories() if t.role == "designer"}
    finally:
        store.close()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return envs, designers, {r["step"]: r for r in rows if "envs_requested" in r}


@pytest.mark.parametrize("mode", ["numbers", "code"])
def test_an_edit_is_validated_linked_to_its_parent_and_a_copy_is_rejected(tiny_model_path, tmp_path, mode):
    # numbers: the designer's reply gives the parent's two numbers new values; code: it writes pick_env.py out whole
    designer = ["3, 500}"] if mode == "numbers" else [PICK + "```\n"]
    envs, designers, steps = _run(tiny_model_path, tmp_path, mode, designer)
    # step 1: both slots edit the seed; valid, with a parent
    for env_id in ("s0000-e00-a1", "s0000-e01-a1"):
        env = envs[env_id]
        assert env.valid, env.reason
        assert env.parent_id == "seed-pick_seed" and env.source == "designed"
        assert dict((name, ok) for name, ok, _ in env.checks)["revalidation"]
        if mode == "numbers":
            assert env.code == PICK.replace("Round", "Game").replace("randint(1, 2)", "randint(1, 3)").replace("9999", "500")
            assert env.reply == "\\boxed{3, 500}"
            assert designers[env_id].temperature == 1.0  # play.edit_temperature
        else:
            assert env.code == PICK.strip("\n")
    # step 2: the same variant again reproduces an environment the memory now holds: a duplicate, rejected
    for env_id in ("s0001-e00-a1", "s0001-e01-a1"):
        env = envs[env_id]
        assert not env.valid and env.reason.startswith("duplicate: reproduces s0000-e0"), env.reason
        assert env.checks[-1][:2] == ("novel", False)
    assert (steps[0]["edits_requested"], steps[0]["edits_valid"], steps[0]["design_valid_rate_edit"]) == (2, 2, 1.0)
    assert (steps[1]["edit_duplicates"], steps[1]["design_valid_rate_edit"], steps[1]["design_valid_rate_fresh"]) == (2, 0.0, None)
