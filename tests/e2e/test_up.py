"""End to end: `spade-engine up` for 3 steps through the real processes, ZeroMQ, LMDB, sandbox and learner.

The rollout worker uses the scripted backend (tests/e2e/data): it says chosen designer completions (one valid
environment, one invalid) and agent replies, scored by the tiny random model so their log-probs are real; the
learner trains the same tiny model for real.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from engine.protocol.messages import unpack_ints, unpack_mask
from engine.metrics.phases import PHASES
from storage.store import Store
from tests.e2e.helpers import K, REPO, subprocess_env, up_command, up_script


def test_up_runs_the_whole_loop(tiny_model_path, tmp_path):
    run_dir = tmp_path / "run"
    result = subprocess.run(
        # groups of 6: the weights must change, so some group must have reward variance (with 2 plays, 6 groups all
        # without variance happen 1 run in 64; with 6 plays, about 1 in 10^9)
        up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=3, extra=("--set", "play.plays_per_env=6")),
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "run directory:" in result.stdout
    report = (run_dir / "report.html").read_text()
    assert "data:image/png;base64," in report and "single_env_class" in report  # plots, and the rejected design's failed check

    store = Store.open(run_dir / "store", readonly=True)
    envs = list(store.environments())
    trajectories = list(store.trajectories())
    rewards = list(store.designer_rewards())
    state = store.state()
    store.close()

    # the invalid design is stored with its reason; the valid one is played
    rejected = [e for e in envs if e.source == "designed" and not e.valid]
    valid = [e for e in envs if e.source == "designed" and e.valid]
    assert rejected and all(e.reason.startswith("single_env_class") for e in rejected)
    assert valid and all(e.hint for e in valid)
    # both roles and both arms are stored
    assert {(t.role, t.arm) for t in trajectories} >= {("designer", "design"), ("agent", "hint"), ("agent", "no_hint")}
    # the policy version advanced (3 steps + the final flush of delayed designer samples) ...
    assert state.policy_version == 4 and state.finished
    # ... and the workers used it: with max_staleness 0, every agent token of step s was sampled by version s
    for t in trajectories:
        if t.role == "agent" and t.status != "failed":
            versions = unpack_ints(t.sample.versions)[unpack_mask(t.sample.loss_mask) == 1]
            assert set(versions.tolist()) == {t.step}, (t.sample_id, set(versions.tolist()))
    # designer rewards appear exactly k steps after their environments
    assert {r.env_step for r in rewards} == {0, 1, 2}
    assert all(r.reward_step - r.env_step == K for r in rewards)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1, 2, 3]
    for m in metrics[:3]:
        for key in ("policy_version", "envs_requested", "envs_valid", "win_rate_no_hint", "win_rate_hint", "mean_regret", "learnable_share", "tokens_per_s", "learner_loss", "staleness"):
            assert key in m
    assert sum(m["designer_samples"] for m in metrics[:3]) == 2  # the step-0 and step-1 designs; step 2's is the flush
    # each step's time by phase sums to its wall time (engine/metrics/phases.py): the loop leaves nothing unaccounted
    for m in metrics[:3]:
        phases = sum(m[f"time_{phase}_s"] for phase in PHASES)
        assert abs(phases - m["time_step_s"]) <= 0.05 * m["time_step_s"], (m["step"], phases, {k: v for k, v in m.items() if k.startswith("time_")})
        assert m["time_plays_s"] > 0 and m["learner"]["learner_update_s"] > 0 and 0 <= m["generator_busy_share"] <= 1
        assert m["generator_concurrency"] == 0 or m["generator_concurrency"] >= 1  # heartbeats every 2 s: a short step may see none
    assert metrics[0]["time_design_s"] > 0 and metrics[0]["time_validation_s"] > 0  # the refresh step designs
    assert metrics[1]["time_learner_update_s"] > 0  # step 2 waits for step 1's update (run.max_staleness = 0)

    # stored trajectories can be replayed from LMDB by the command line
    replay = subprocess.run(
        [sys.executable, "-m", "engine.cli", "replay", str(run_dir), "--role", "agent", "--step", "1", "--limit", "2"],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=60,
    )
    assert replay.returncode == 0 and replay.stdout.count("step 1 agent") == 2, replay.stdout + replay.stderr

    # the weights changed, and the checkpoint loads and generates with transformers
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    checkpoint = (run_dir / "checkpoints" / "latest").resolve()
    before = load_file(str(Path(tiny_model_path) / "model.safetensors"))
    after = load_file(str(checkpoint / "model.safetensors"))
    assert any(not np.array_equal(before[name].numpy(), after[name].numpy()) for name in before)
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    ids = tokenizer("def f(x):", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=5, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1]


def test_resume_continues_where_the_run_stopped(tiny_model_path, tmp_path):
    run_dir = tmp_path / "run"
    script = up_script(tmp_path)
    first = subprocess.run(up_command(tiny_model_path, run_dir, script, steps=2), cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    again = subprocess.run(
        [sys.executable, "-m", "engine.cli", "up", "--no-live", "--resume", str(run_dir), "--steps", "4"], cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resume: 2 steps done; continuing at step 3 of 4" in again.stdout
    store = Store.open(run_dir / "store", readonly=True)
    batches = list(store.batches())
    state = store.state()
    steps_played = sorted({t.step for t in store.trajectories() if t.role == "agent"})
    store.close()
    assert steps_played == [0, 1, 2, 3] and state.steps_done == 4 and state.finished
    assert [b.version for b in batches] == list(range(len(batches))) and state.policy_version == len(batches)
    keys = [e.trajectory_key for b in batches for e in b.entries]
    assert len(keys) == len(set(keys)), "a sample was trained twice"


def test_an_extra_worker_attaches_to_a_running_engine(tiny_model_path, tmp_path, processes):
    run_dir = tmp_path / "run"
    engine = processes.popen(up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=12), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (run_dir / "metrics.jsonl").exists():
        time.sleep(0.2)
    extra = processes.popen(
        [sys.executable, "-m", "engine.cli", "worker", "--run-dir", str(run_dir), "--worker-id", "extra"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    config = (run_dir / "config.toml").read_text()
    # a second engine on the same run is refused, and changes nothing
    second = processes.run([sys.executable, "-m", "engine.cli", "up", "--resume", str(run_dir), "--steps", "99"], timeout=60)
    assert second.returncode == 2 and "is in use by a running engine (pid" in second.stderr, second.stdout + second.stderr
    assert (run_dir / "config.toml").read_text() == config
    processes.track(engine.pid)  # so that whatever outlives a failure below is ended by pid
    out, err = engine.communicate(timeout=240)
    assert engine.returncode == 0, out + err
    assert "worker extra joined" in out
    extra_out, _ = extra.communicate(timeout=60)  # the engine's shutdown ends it too
    assert extra.returncode == 0, extra_out


def test_a_worker_without_an_engine_says_so(tiny_model_path, tmp_path):
    from engine.protocol.config_loading import dump_config, load_config
    from engine.protocol.paths import RunPaths

    paths = RunPaths(tmp_path / "run")
    paths.root.mkdir()
    config = load_config(overrides=["inference.backend=\"scripted\"", f"inference.script={json.dumps(str(up_script(tmp_path)))}", "worker.connect_timeout_s=2"])
    paths.config.write_text(dump_config(config))
    paths.update_meta(model_path=tiny_model_path)
    result = subprocess.run(
        [sys.executable, "-m", "engine.cli", "worker", "--run-dir", str(paths.root)], cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert "error: no engine answered at ipc://" in result.stderr and "Traceback" not in result.stderr


def test_ctrl_c_stops_everything_and_keeps_committed_data(tiny_model_path, tmp_path, processes):
    run_dir = tmp_path / "run"
    proc = processes.popen(up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=50), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    metrics = run_dir / "metrics.jsonl"
    while time.monotonic() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 1):
        time.sleep(0.2)
    assert metrics.exists(), "the run never finished a step"
    children = processes.track(proc.pid)
    assert children, "the engine has no children"
    proc.send_signal(signal.SIGINT)
    # The engine stops its children one by one (up to 20 s grace each) and writes the summary: on a loaded machine
    # that has taken over 60 s, so the bound is what the stop may take, not what it takes on a quiet one.
    try:
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:  # say where it stood, not only that it did not stop
        os.killpg(proc.pid, signal.SIGKILL)  # its own process group (Processes.popen); the rest end with the fixture
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"the engine did not stop within 240 s of Ctrl-C; its output:\n{out[-3000:]}\n{err[-5000:]}")
    assert proc.returncode == 130, out + err
    assert "interrupted" in err and "Traceback" not in err
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["model_path"]
    # the level the worker's sandbox runs at, and what it leaves open (nothing at any level the pool picks itself)
    assert meta["sandbox_isolation"].endswith("+seccomp") and meta["sandbox_uncontained"] == [], meta
    # every child is gone
    for log in (run_dir / "logs").glob("*.log"):
        assert log.exists()
    assert processes.alive(children) == []
    store = Store.open(run_dir / "store", readonly=True)
    done = store.state().steps_done
    assert done >= 1
    assert any(t.role == "agent" for t in store.trajectories())
    store.close()

    # the interrupted run resumes: one more step, every sample trained once, the learner's versions line up
    again = processes.run([sys.executable, "-m", "engine.cli", "up", "--no-live", "--resume", str(run_dir), "--steps", str(done + 1)], timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    store = Store.open(run_dir / "store", readonly=True)
    state, batches = store.state(), list(store.batches())
    store.close()
    assert state.finished and state.steps_done == done + 1 and state.policy_version == len(batches)
    keys = [e.trajectory_key for b in batches for e in b.entries]
    assert len(keys) == len(set(keys)), "a sample was trained twice"


def test_a_killed_engine_takes_its_children_and_resumes_with_an_attached_worker(tiny_model_path, tmp_path, processes):
    """SIGKILL gives the engine no chance to stop its children: they notice it is gone and stop themselves, so
    `up --resume` meets no orphaned learner. A worker attached by hand stays, and joins the resumed engine."""
    run_dir = tmp_path / "run"
    output = tmp_path / "engine.out"
    with open(output, "w") as out:
        proc = processes.popen(up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=50), stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (run_dir / "metrics.jsonl").exists():
        time.sleep(0.2)
    assert (run_dir / "metrics.jsonl").exists(), "the run never finished a step"
    extra = processes.popen(
        [sys.executable, "-m", "engine.cli", "worker", "--run-dir", str(run_dir), "--worker-id", "extra"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    while time.monotonic() < deadline and "worker extra joined" not in output.read_text():
        time.sleep(0.2)
    assert "worker extra joined" in output.read_text()
    children = processes.track(proc.pid)
    assert len(children) >= 2  # the learner and the engine's worker
    proc.kill()  # the engine alone, not its group: its children must stop by themselves
    proc.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and processes.alive(children):
        time.sleep(0.5)
    assert processes.alive(children) == [], "children outlived the engine"
    assert "the engine (pid" in (run_dir / "logs" / "learner.log").read_text()
    assert extra.poll() is None  # not the engine's child: it waits for an engine

    store = Store.open(run_dir / "store", readonly=True)
    done = store.state().steps_done
    store.close()
    again = processes.run([sys.executable, "-m", "engine.cli", "up", "--no-live", "--resume", str(run_dir), "--steps", str(done + 2)], timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "worker extra joined" in again.stdout
    store = Store.open(run_dir / "store", readonly=True)
    state, batches = store.state(), list(store.batches())
    store.close()
    assert state.finished and state.steps_done == done + 2 and state.policy_version == len(batches)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    figures = sorted(r["step"] for r in rows if "envs_requested" in r)  # every step's row, with its figures, once
    assert figures == list(range(done + 2)), figures
    processes.track(extra.pid)
    extra_out, _ = extra.communicate(timeout=60)  # the resumed engine's shutdown ends it
    assert extra.returncode == 0 and "joining again" in extra_out, extra_out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "run.stepz=3"], "error: unknown config key run.stepz"),
        (["--set", "run.steps=three"], "error: bad config value: Expected `int`, got `str` - at `run.steps`"),
        (["--corpus", "/nonexistent/corpus.jsonl"], "error: corpus /nonexistent/corpus.jsonl does not exist"),
        (["--model", "/tmp"], "error: model path /tmp is not a Hugging Face model folder (no config.json)"),
        (["--steps", "x"], "error: argument --steps: invalid int value: 'x'"),
        (["--set", 'curriculum.seeds="/nonexistent/seeds"'], "error: curriculum.seeds: /nonexistent/seeds has no manifest.json"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "engine.cli", "up", "--run-dir", str(tmp_path / "r"), *args], cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_help_imports_no_torch():
    """`up --help` is fast because it imports no torch (what makes it slow); a wall clock would fail on a busy machine."""
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from engine.cli import main\ntry:\n    main(['up', '--help'])\nexcept SystemExit: pass\nassert 'torch' not in sys.modules, 'torch imported'"],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert "--steps" in result.stdout
