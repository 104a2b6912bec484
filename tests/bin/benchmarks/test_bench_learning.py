"""bin/bench learning's `--reuse-initial` (bin/benchmarks/learning.py reuse_initial): the initial model's probe
rows of an earlier experiment, copied only when they were played on the same environments, model and settings."""

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("bench_learning", REPO / "bin" / "benchmarks" / "learning.py")
learning = importlib.util.module_from_spec(spec)
spec.loader.exec_module(learning)

MODEL = "/models/SmolLM2"


def _experiment(folder: Path, *, max_turns=3, model=MODEL, env_text="class E: ...\n", rows=()) -> Path:
    (folder / "spade").mkdir(parents=True)
    (folder / "spade" / "config.toml").write_text(f"[play]\nmax_turns = {max_turns}\nagent_max_tokens = 48\nagent_temperature = 1.0\n")
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
