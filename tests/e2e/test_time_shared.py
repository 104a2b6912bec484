"""End to end on a faked one-GPU node (SPADE_FAKE_GPUS=1: the plan is made for one GPU; the processes still run on
the CPU, the scripted backend's sleep and wake do nothing there): `up` plans the time-shared layout, prints it and
writes it to run.json, starts the worker first, and around every update the worker sleeps before the batch goes
to the learner and wakes with the new version after it is published. This stands in for vLLM's sleep/wake on a GPU,
which has never run here."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib

from tests.e2e.helpers import REPO, state_and_done_ids, subprocess_env, up_command, up_script

STEPS = 2


def test_one_fake_gpu_runs_time_shared_with_sleeps_and_wakes_in_order(tiny_model_path, tmp_path):
    run_dir = tmp_path / "run"
    env = dict(subprocess_env(), SPADE_FAKE_GPUS="1x80")
    result = subprocess.run(up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=STEPS), cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "placement: time-shared on 1 GPU(s) of 80 GiB" in result.stdout
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["placement"]["layout"] == "time-shared"
    assert [(p["name"], p["gpus"], p["sleeps"]) for p in meta["placement"]["processes"]] == [("worker-w0", [0], True), ("learner", [0], False)]
    config = tomllib.loads((run_dir / "config.toml").read_text())
    assert config["learner"]["gpus"] == [0] and config["inference"]["placement"] == "time-shared"
    # One round at start (the worker asleep while the learner loads), then one per update; batches sent back to back
    # (the last step's and the final designer flush) share a round. None went unanswered.
    rounds = meta["time_share"]["rounds"]
    assert rounds >= STEPS and meta["time_share"]["unanswered"] == 0
    # The worker's log: asleep / awake in turn, waking first with v0 (start), then with each newly published version.
    log = (run_dir / "logs" / "worker-w0.log").read_text()
    turns = re.findall(r"\[w0\] (asleep|awake with v(\d+))", log)
    kinds = ["asleep" if t == "asleep" else "awake" for t, _ in turns]
    # (the last wake may be cut short by the run's Shutdown right behind it)
    assert kinds in (["asleep", "awake"] * rounds, (["asleep", "awake"] * rounds)[:-1]), turns
    woke_on = [int(v) for t, v in turns if t.startswith("awake")]
    state, _ = state_and_done_ids(run_dir)
    assert woke_on[0] == 0 and woke_on == sorted(set(woke_on)) and woke_on[-1] <= state.policy_version, (woke_on, state.policy_version)
    assert len(woke_on) < rounds or woke_on[-1] == state.policy_version
