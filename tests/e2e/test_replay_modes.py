"""`replay`, `inspect` and `report` on the store of a real scripted `up --steps 3` (tiny random model, scripted
backend as in test_up.py; a checkpoint at every version, two mini-batches per update so the loss is not ~0):

- `replay --train --steps S:S` of a step whose update trained something, from the checkpoint before it, reproduces
  the live update: the same loss (1e-5), the same gradient norm and the same weights as the live checkpoint after it;
- `--export` round-trips every field of every record; `--rescore` with the pure regret gives the numbers worked out
  by hand from the stored returns; `inspect` prints the expected transcript; `report` draws every plot (and
  headless Chromium renders it); a corrupt and a truncated record are named, and the rest stays readable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from storage.store import Store

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
# Never a pick of 1 or 2: every play of graded_pick_env.py then loses its seed's own penalty, so the two plays of a
# group (two seeds) never tie and every step's update trains something, whichever play gets which reply.
REPLIES = ["\\boxed{3}", "I pick \\boxed{0}", "hmm \\boxed{12}"]


def _env():
    return dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")


def cli(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.cli", *map(str, args)], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def run_dir(tiny_model_path, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("replay")
    invalid = "class Broken:\n    def reset(self):\n        return 'no Env class here'\n"
    script = {"designer": [(DATA / "graded_pick_env.py").read_text() + "```\n", invalid + "```\n"],
              "hint": ["The hidden number is one of two; answer with one of them."], "agent": REPLIES}
    (tmp / "script.json").write_text(json.dumps(script))
    sets = [
        "inference.backend=scripted", f"inference.script={json.dumps(str(tmp / 'script.json'))}", "curriculum.refresh_interval=1",
        "curriculum.envs_per_step=2", "curriculum.skills_per_refresh=2", "curriculum.design_attempts=1", "run.max_staleness=0",
        "play.max_turns=2", "learner.learning_rate=1e-3", f"play.designer_prefill={json.dumps(chr(96) * 3 + 'python' + chr(10))}",
        "learner.checkpoint_every=1", "learner.keep_checkpoints=0", "learner.mini_batches=2",
        # fresh designs, groups of 2 and the reference's player prompt, as the expected numbers and transcript were made
        "curriculum.edit_share=0", "play.plays_per_env=2", "play.hint_plays_per_env=2", 'play.agent_prompt="reason"', 'play.agent_prefill=""',
    ]
    run = tmp / "run"
    result = cli("up", "--no-live", "--model", tiny_model_path, "--run-dir", run, "--steps", 3,
                 *[x for s in sets for x in ("--set", s)], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return run


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_the_run_measured_the_curriculum_signals(run_dir):
    rows = [m for m in _metrics(run_dir) if "envs_requested" in m]
    for m in rows:
        for key in ("validation_pass_rate", "rejection_reasons", "vendi_envs_per_n", "vendi_memory_per_n", "near_duplicates", "formula_reveal_rate",
                    "reward_levels", "partial_reward_levels", "win_rate_by_skill", "sample_staleness_mean", "tokens_per_s_agent", "tokens_per_s_designer"):
            assert key in m, key
        assert m["validation_pass_rate"] == 0.5 and m["rejection_reasons"] == {"single_env_class": 1}  # one valid, one broken design a step
        assert m["formula_reveal_rate"] == 0.0  # "pick 1 or 2" lists the options, it does not give the answer away


def test_replay_train_reproduces_the_live_update(run_dir, tmp_path):
    from safetensors.numpy import load_file

    # Every step's update trained something (no group ties, see REPLIES): replay the one whose loss is furthest from 0
    # (mini-batch 1 runs after the first optimizer step).
    rows = [m for m in _metrics(run_dir) if "envs_requested" in m]
    assert len(rows) == 3 and all(m["learner"]["trained_samples"] > 0 for m in rows), [m["learner"] for m in rows]
    row = max(rows, key=lambda m: abs(m["learner"]["loss"]))
    step, version, live = row["step"], row["policy_version"] - 1, row["learner"]  # batch v makes version v + 1
    out = tmp_path / "replayed"
    result = cli("replay", run_dir, "--train", "--steps", f"{step}:{step}", "--out", out, "--objective", "run", "--objective", "tis")
    assert result.returncode == 0, result.stdout + result.stderr
    (replayed,) = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    assert replayed["version"] == version and replayed["step"] == step and replayed["live_loss"] == live["loss"]
    assert abs(replayed["loss"] - live["loss"]) < 1e-5
    assert replayed["grad_norm"] == pytest.approx(live["grad_norm"], rel=1e-6) and replayed["grad_norm"] > 0
    checkpoints = run_dir / "checkpoints"

    def weights(folder: Path) -> dict:
        return load_file(str(folder / "model.safetensors"))

    after, again = weights(checkpoints / f"step-{step:06d}"), weights(out / "run" / f"step-{step:06d}")
    assert max(float(np.abs(after[n] - again[n]).max()) for n in after) < 1e-6  # the same weights as the live run's
    if step > 0:  # the checkpoint after step - 1 holds the weights step's update started from
        before = weights(checkpoints / f"step-{step - 1:06d}")
        assert max(float(np.abs(after[n] - before[n]).max()) for n in after) > 1e-5  # and the update did change them
    assert (out / "tis" / "metrics.jsonl").is_file() and "tis" in result.stdout.splitlines()[0]


def test_replay_train_catches_up_from_an_older_checkpoint(run_dir, tmp_path):
    """Without the checkpoint before step 2, replay starts at the one before step 1, trains batch 1 with the run's own
    settings, then step 2's: the weights after it are still the live run's."""
    from safetensors.numpy import load_file

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("*.lock", "lock.mdb", "step-000001"), symlinks=True)
    result = cli("replay", copy, "--train", "--steps", "2:2", "--out", tmp_path / "out")
    assert result.returncode == 0, result.stdout + result.stderr
    batches = msgpack_batches(tmp_path / "out" / "batches.msgpack")
    assert batches["start_version"] == 1 and batches["first_version"] == 2 and [v for v, _ in batches["batches"]] == [1, 2]
    live = load_file(str(copy / "checkpoints" / "step-000002" / "model.safetensors"))
    again = load_file(str(tmp_path / "out" / "run" / "step-000002" / "model.safetensors"))
    assert max(float(np.abs(live[n] - again[n]).max()) for n in live) < 1e-6


def msgpack_batches(file: Path) -> dict:
    import msgspec

    return msgspec.msgpack.decode(file.read_bytes())


def test_replay_train_refuses_steps_it_does_not_have(run_dir, tmp_path):
    result = cli("replay", run_dir, "--train", "--steps", "7:9", "--out", tmp_path / "x")
    assert result.returncode == 2 and result.stderr.startswith("error: no stored batch for --steps 7:9"), result.stderr


def test_export_round_trips_every_field(run_dir, tmp_path):
    from engine.tools.export import KINDS, record_from_row

    out = tmp_path / "run.jsonl"
    assert cli("replay", run_dir, "--export", out).returncode == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    store = Store.open(run_dir / "store", readonly=True)
    try:
        for kind, (db, _) in KINDS.items():
            assert [record_from_row(kind, r) for r in rows if r["kind"] == kind] == list(store._scan(db)), kind
    finally:
        store.close()
    assert any(r["kind"] == "trajectory" and r["sample"]["logprobs"] and isinstance(r["sample"]["tokens"][0], int) for r in rows)


def test_rescore_with_pure_regret_gives_the_hand_computed_numbers(run_dir, tmp_path):
    out = tmp_path / "rescore.jsonl"
    assert cli("replay", run_dir, "--rescore", "--set", 'reward.designer_reward="regret"', "--out", out).returncode == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    store = Store.open(run_dir / "store", readonly=True)
    plays = [t for t in store.trajectories() if t.role == "agent"]
    store.close()
    designers = [r for r in rows if r["kind"] == "designer_reward"]
    assert designers
    for r in designers:  # k = 1: the window is the refresh step; regret = mean hinted - mean unhinted return there
        hint = [t.episode_return for t in plays if t.env_id == r["env_id"] and t.arm == "hint" and t.status != "failed"]
        no_hint = [t.episode_return for t in plays if t.env_id == r["env_id"] and t.arm == "no_hint" and t.status != "failed"]
        assert r["raw_reward"] == pytest.approx(sum(hint) / len(hint) - sum(no_hint) / len(no_hint))
        assert r["advantage"] == pytest.approx(0.0)  # one design per skill and step: centring leaves nothing
    for r in (r for r in rows if r["kind"] == "step"):
        for a in r["agent_advantages"]:
            group = [t.episode_return for t in plays if t.step == r["step"] and t.env_id == a["env_id"] and t.arm == "no_hint" and t.status != "failed"]
            m, s = np.mean(group), np.std(group)
            assert a["advantage"] == pytest.approx(0.0 if s < 1e-8 else (a["return"] - m) / (s + 1e-8))


def test_inspect_prints_the_expected_transcript(run_dir):
    store = Store.open(run_dir / "store", readonly=True)
    t = next(t for t in store.trajectories(1) if t.role == "agent" and t.arm == "no_hint" and t.env_id.startswith("s0001"))
    store.close()
    result = cli("inspect", run_dir, "--trajectory", t.sample_id)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (f"trajectory 00000001/{t.sample_id}  agent no_hint  env {t.env_id} ({t.skill})  seed {t.seed}  status {t.status}  "
                        f"return {t.episode_return:+.2f}")
    assert lines[1:3] == ["--- user", "You are playing a language game. Make valid actions to win."]
    assert lines[3].startswith("Observation: Round ") and lines[3].endswith(": pick 1 or 2. Answer as \\boxed{n}.")
    assert lines[4] == "Please reason step by step, and put your final answer within \\boxed{}."
    turn = t.turns[0]
    assert lines[5] == "--- agent turn 1 (policy v1)"
    assert lines[6].removesuffix("<|im_end|>") in REPLIES
    ended = "  terminated" if turn.terminated else "  truncated" if turn.truncated else ""
    assert lines[7] == f"    => action {turn.action!r} ({turn.parse_rule})  reward {turn.reward:+.2f}{ended}"


def test_report_of_the_run_draws_every_plot(run_dir, tmp_path):
    from report_checks import assert_not_blank, check_report, screenshot

    out = tmp_path / "report.html"
    assert cli("report", run_dir, "--out", out).returncode == 0
    page = out.read_text()
    check_report(page)
    assert "embedding: " in page or "Diversity" in page
    png = screenshot(out, tmp_path / "report.png", tmp_path)
    assert_not_blank(png, (1280, 4000))
    if os.environ.get("SPADE_REPORT_SCREENSHOT"):  # keep a copy to look at
        shutil.copy(tmp_path / "report.png", os.environ["SPADE_REPORT_SCREENSHOT"])


def test_bad_records_are_named_and_the_rest_stays_readable(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("*.lock", "lock.mdb"))
    store = Store.open(copy / "store")
    (key, value), = [(k, v) for k, v in store._env.begin().cursor(db=store._dbs["environments"]) if k.startswith(b"s0001")][:1]
    with store._env.begin(write=True) as txn:
        txn.put(key, value[: len(value) // 2], db=store._dbs["environments"])  # a truncated record
        txn.put(b"00000001/zz-garbage", b"\x92\xa3bad", db=store._dbs["trajectories"])  # a corrupt one
    store.close()
    named = f"record {key.decode()!r} in database 'environments' is corrupt"
    garbage = "record '00000001/zz-garbage' in database 'trajectories' is corrupt"
    for args in (["replay", copy, "--step", 1], ["inspect", copy], ["replay", copy, "--export", tmp_path / "x.jsonl"]):
        result = cli(*args)  # what can be read is shown, then one line names the damage: exit 2
        assert result.returncode == 2 and "Traceback" not in result.stderr, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "2 damaged records (and 1 more), the first: record " in lines[0], (args, result.stderr)
        assert named in lines[0] or garbage in lines[0], (args, result.stderr)
    report = cli("report", copy)
    assert report.returncode == 2 and "Traceback" not in report.stderr and len(report.stderr.strip().splitlines()) == 1, report.stderr
    assert named in (copy / "report.html").read_text().replace("&#x27;", "'")
    inspect = cli("inspect", copy).stdout
    assert "s0000-e00-a1" in inspect and "s0002-e00-a1" in inspect and key.decode() not in inspect
    assert cli("replay", copy, "--step", 1).stdout.count("step 1 agent") >= 2
