"""bin/bench learning's `--reuse-initial` and `--reuse-spade` (bin/benchmarks/learning.py reuse_initial,
reuse_spade): probe rows of an earlier experiment, copied only when they were played on the same environments, model
and settings."""

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("bench_learning", REPO / "bin" / "benchmarks" / "learning.py")
learning = importlib.util.module_from_spec(spec)
spec.loader.exec_module(learning)

MODEL = "/models/SmolLM2"


def _experiment(folder: Path, *, max_turns=3, model=MODEL, env_text="class E: ...\n", rows=(), stop_at_action=True) -> Path:
    (folder / "spade").mkdir(parents=True)
    (folder / "spade" / "config.toml").write_text(f"[play]\nmax_turns = {max_turns}\nagent_max_tokens = 48\nagent_temperature = 1.0\n"
                                                  f"stop_at_action = {str(stop_at_action).lower()}\n")
    (folder / "spade" / "run.json").write_text(json.dumps({"model_path": model}))
    (folder / "probe-envs").mkdir()
    (folder / "probe-envs" / "e.py").write_text(env_text)
    if rows:
        (folder / "probe").mkdir()
        (folder / "probe" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _row(folder: Path, label: str, episode: str, model=MODEL) -> dict:
    return {"model": f"vllm:{model}", "label": label, "suite": f"envs:{folder / 'probe-envs'}", "dataset": "e",
            "episode": episode, "score": 1.0, "win": True}


def test_the_initial_models_rows_are_copied_under_this_probes_suite(tmp_path):
    earlier = tmp_path / "earlier"
    _experiment(earlier, rows=[_row(earlier, "spade@initial", "0"), _row(earlier, "spade@initial", "1"),
                               _row(earlier, "spade", "0", model="/runs/spade/checkpoint")])  # not copied: not the initial model
    out = _experiment(tmp_path / "now")
    assert learning.reuse_initial(earlier, out) == 2
    rows = [json.loads(line) for line in (out / "probe" / "results.jsonl").read_text().splitlines()]
    assert [(r["label"], r["episode"], r["suite"]) for r in rows] == [
        ("spade@initial", "0", f"envs:{out / 'probe-envs'}"), ("spade@initial", "1", f"envs:{out / 'probe-envs'}")]
    assert learning.reuse_initial(earlier, out) == 0  # run again (a resumed bench): nothing twice


@pytest.mark.parametrize("change, says", [
    (dict(max_turns=5), "play.max_turns = 3, this run plays with 5"),
    (dict(stop_at_action=False), "play.stop_at_action = True, this run plays with False"),
    (dict(env_text="class Other: ...\n"), "probe environment e.py differs"),
    (dict(model="/models/other"), "this run's is /models/other"),
])
def test_a_probe_played_otherwise_is_refused_saying_what_differs(tmp_path, change, says):
    earlier = tmp_path / "earlier"
    _experiment(earlier, rows=[_row(earlier, "spade@initial", "0")])
    out = _experiment(tmp_path / "now", **change)
    with pytest.raises(SystemExit) as refused:
        learning.reuse_initial(earlier, out)
    assert says in str(refused.value)
    assert not (out / "probe" / "results.jsonl").exists()


def test_a_folder_without_a_probe_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no probe results there"):
        learning.reuse_initial(_experiment(tmp_path / "earlier"), _experiment(tmp_path / "now"))


# --reuse-spade (reuse_spade): the SPADE arm and the initial model's probe from an earlier experiment; only the
# fixed pool runs here.
SPADE_ID = "vllm:/earlier/spade/checkpoints/step-000040"
INITIAL_ID = f"vllm:{MODEL}"


def _weights(folder: Path, data: bytes = b"weights") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(data)
    return folder


def _earlier(folder: Path, model: Path, *, minutes="60", learner="learning_rate = 0.0002") -> Path:
    rows = [_row(folder, "spade@initial", "0"), _row(folder, "spade@initial", "1"),
            dict(_row(folder, "spade", "0"), model=SPADE_ID), dict(_row(folder, "spade", "1"), model=SPADE_ID),
            dict(_row(folder, "other", "0"), model="vllm:/elsewhere")]  # another model's row: not copied
    _experiment(folder, rows=rows)
    config = (folder / "spade" / "config.toml").read_text()
    (folder / "spade" / "config.toml").write_text(f"[learner]\n{learner}\n\n{config}")
    (folder / "spade" / "run.json").write_text(json.dumps({"model_path": str(model), "argv": ["up", "--minutes", minutes]}))
    summary = {"suite": f"envs:{folder / 'probe-envs'}", "models": [{"label": "initial", "model": INITIAL_ID},
                                                                    {"label": "SPADE", "model": SPADE_ID}]}
    summary["initial_model_sha256"] = learning.model_sha256(folder / "spade")
    summary["probe_envs_sha256"] = learning.probe_envs_sha256(folder / "probe-envs")
    (folder / "learning.json").write_text(json.dumps(summary))
    return folder


def _fixed_here(folder: Path, model: Path, *, learner="learning_rate = 0.0002", max_turns=3) -> Path:
    _experiment(folder, max_turns=max_turns, model=str(model))
    (folder / "spade").rename(folder / "fixed")
    config = (folder / "fixed" / "config.toml").read_text()
    (folder / "fixed" / "config.toml").write_text(f"[learner]\n{learner}\n\n{config}")
    return folder


@pytest.mark.parametrize("saved_copy", [False, True])
def test_the_spade_arms_and_initial_models_rows_are_copied_under_this_probes_suite(tmp_path, saved_copy):
    earlier = _earlier(tmp_path / "earlier", _weights(tmp_path / "there" / "model"))
    if saved_copy:  # no probe-envs folder: the digests in learning.json stand for it
        shutil.rmtree(earlier / "probe-envs")
    out = _fixed_here(tmp_path / "now", _weights(tmp_path / "here" / "model"))  # another path, the same weights
    assert learning.reuse_spade(earlier, out, 60) == {"initial": INITIAL_ID, "SPADE": SPADE_ID}
    rows = [json.loads(line) for line in (out / "probe" / "results.jsonl").read_text().splitlines()]
    assert sorted((r["model"], r["episode"]) for r in rows) == sorted([(INITIAL_ID, "0"), (INITIAL_ID, "1"), (SPADE_ID, "0"), (SPADE_ID, "1")])
    assert {r["suite"] for r in rows} == {f"envs:{out / 'probe-envs'}"}
    learning.reuse_spade(earlier, out, 60)  # a resumed bench: nothing twice
    assert len((out / "probe" / "results.jsonl").read_text().splitlines()) == 4


@pytest.mark.parametrize("earlier_change, here_change, minutes, says", [
    ({}, dict(learner="learning_rate = 5e-05"), 60, "learner.learning_rate = 0.0002, the fixed pool here with 5e-05"),
    ({}, dict(max_turns=5), 60, "play.max_turns = 3, the fixed pool here with 5"),
    ({}, {}, 30, "ran for 60.0 minutes, this bench's budget is 30"),
    (dict(minutes="45"), {}, 60, "ran for 45.0 minutes"),
])
def test_a_spade_arm_run_otherwise_is_refused_saying_what_differs(tmp_path, earlier_change, here_change, minutes, says):
    earlier = _earlier(tmp_path / "earlier", _weights(tmp_path / "there" / "model"), **earlier_change)
    out = _fixed_here(tmp_path / "now", _weights(tmp_path / "here" / "model"), **here_change)
    with pytest.raises(SystemExit) as refused:
        learning.reuse_spade(earlier, out, minutes)
    assert says in str(refused.value)
    assert not (out / "probe" / "results.jsonl").exists()


def test_a_saved_copy_whose_probe_environments_differ_is_refused(tmp_path):
    earlier = _earlier(tmp_path / "earlier", _weights(tmp_path / "there" / "model"))
    shutil.rmtree(earlier / "probe-envs")
    out = _fixed_here(tmp_path / "now", _weights(tmp_path / "here" / "model"))
    (out / "probe-envs" / "e.py").write_text("class Changed: ...\n")
    with pytest.raises(SystemExit, match="probe environment e.py differs"):
        learning.reuse_spade(earlier, out, 60)


def test_a_spade_arm_from_other_base_weights_is_refused(tmp_path):
    earlier = _earlier(tmp_path / "earlier", _weights(tmp_path / "there" / "model"))
    out = _fixed_here(tmp_path / "now", _weights(tmp_path / "here" / "model", b"other weights"))
    with pytest.raises(SystemExit, match="base model's weights .* are not this run's"):
        learning.reuse_spade(earlier, out, 60)


def test_a_folder_without_a_finished_experiment_is_refused_for_reuse_spade(tmp_path):
    earlier = _experiment(tmp_path / "earlier", rows=[_row(tmp_path / "earlier", "spade@initial", "0")])  # no learning.json
    out = _fixed_here(tmp_path / "now", _weights(tmp_path / "here" / "model"))
    with pytest.raises(SystemExit, match="no finished experiment there"):
        learning.reuse_spade(earlier, out, 60)


def test_the_probe_plays_only_the_models_not_reused_and_names_all_three(tmp_path, monkeypatch):
    out = _fixed_here(tmp_path / "now", _weights(tmp_path / "here" / "model"))
    (out / "probe").mkdir()
    (out / "probe" / "results.jsonl").write_text("")
    calls = []

    def eval_stub(command, **kwargs):
        calls.append(command)
        backend = command[command.index("--backend") + 1] if "--backend" in command else "vllm"
        ids = ["vllm:/fixed/ckpt"] if backend == "vllm" else [f"{backend}:/base"]
        return subprocess.CompletedProcess(command, 0, stdout=json.dumps({"suite": "envs:x", "model_ids": ids}))

    monkeypatch.setattr(learning.subprocess, "run", eval_stub)
    _, suite, models = learning._probe(out, out / "probe-envs", {"fixed": out / "fixed"}, 32, [],
                                       {"initial": INITIAL_ID, "SPADE": SPADE_ID})
    assert len(calls) == 3 and str(out / "fixed") in calls[0] and not any(str(a).endswith("@initial") for a in calls[0])
    assert [c[c.index("--backend") + 1] for c in calls[1:]] == ["copy", "random"]  # chance on the same pairs, always played
    assert models == [(INITIAL_ID, "initial"), (SPADE_ID, "SPADE"), ("vllm:/fixed/ckpt", "fixed"), ("copy:/base", "copy-bot"),
                      ("random:/base", "random")]


def test_without_reuse_the_probe_plays_the_initial_model_and_both_arms_in_order(tmp_path, monkeypatch):
    out = _experiment(tmp_path / "now")
    shutil.copytree(out / "spade", out / "fixed")
    (out / "probe").mkdir()
    (out / "probe" / "results.jsonl").write_text("")
    ids = ["vllm:/base", "vllm:/spade/ckpt", "vllm:/fixed/ckpt"]

    def eval_stub(command, **kwargs):
        if "--backend" in command:  # a chance player, on the initial model's tokenizer
            assert command[2] == f"{out / 'spade'}@initial" and command[3] == "--suite"
            backend = command[command.index("--backend") + 1]
            return subprocess.CompletedProcess(command, 0, stdout=json.dumps({"suite": "envs:x", "model_ids": [f"{backend}:/base"]}))
        assert command[2:5] == [f"{out / 'spade'}@initial", str(out / "spade"), str(out / "fixed")]
        return subprocess.CompletedProcess(command, 0, stdout=json.dumps({"suite": "envs:x", "model_ids": ids}))

    monkeypatch.setattr(learning.subprocess, "run", eval_stub)
    _, _, models = learning._probe(out, out / "probe-envs", {"SPADE": out / "spade", "fixed": out / "fixed"}, 32, [])
    assert models == list(zip(ids + ["copy:/base", "random:/base"], ["initial", "SPADE", "fixed", "copy-bot", "random"]))


def test_the_earlier_arm_is_checked_before_the_fixed_pool_runs(tmp_path):
    earlier = _earlier(tmp_path / "earlier", _weights(tmp_path / "there" / "model"))
    out = _experiment(tmp_path / "now")
    shutil.rmtree(out / "spade")  # nothing has run here yet: only the probe folder is built
    summary, _ = learning.spade_source(earlier, out, 60)
    assert summary["initial_model_sha256"]
    with pytest.raises(SystemExit, match="this bench's budget is 30"):
        learning.spade_source(earlier, out, 30)


def test_the_designers_side_is_summarised_from_the_runs_metrics(tmp_path):
    run = tmp_path / "spade"
    run.mkdir()
    rows = [
        {"step": 0, "refresh": True, "envs_requested": 4, "envs_valid": 2, "learnable_share": 0.5, "mean_regret": 0.25,
         "hint_plays": 8, "nonzero_variance_share": 0.75},
        {"step": 1, "refresh": False, "learnable_share": 0.25, "mean_regret": 0.0, "hint_plays": 0, "nonzero_variance_share": 0.5},
        {"step": 2, "refresh": True, "envs_requested": 4, "envs_valid": 1, "learnable_share": 0.0, "mean_regret": -0.5,
         "hint_plays": 4, "nonzero_variance_share": 0.25},
        {"eval": {"win_rate": 0.2}, "eval_policy_version": 2},  # an in-loop probe row: not a step
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    side = learning.designer_side(run)
    assert side == {"steps": 3, "refreshes": 2, "valid_designs_per_refresh": 1.5, "valid_share_of_requested": 0.375,
                    "learnable_share": 0.25, "mean_regret": -0.125, "nonzero_variance_share": 0.5,
                    "variance_groups_all_copied": None, "variance_groups_with_departure": None, "variance_groups_no_example": None,
                    "copy_share": None}  # no store
    sources = {"variance_groups_all_copied": 3, "variance_groups_with_departure": 5, "variance_groups_no_example": 2, "copy_share": 0.75}
    table = learning.designer_markdown({"SPADE": side | sources})
    assert table.splitlines()[-1] == "| SPADE | 3 | 2 | 1.5 | 0.375 | 0.25 | -0.125 | 0.5 | 3 / 5 / 2 | 0.75 |"
