"""The placement plan (engine/protocol/placement.py) on faked GPU nodes: the GPU count and size are arguments (on a
real node they come from nvidia-smi), the model is Qwen3-4B's published config.json, and nothing touches CUDA. These
stand in for `up` on 1, 2 and 8 GPUs: the layout chosen by GPU count and staleness bound, the data-parallel engines
on disjoint GPUs, and the one-line refusals."""

from __future__ import annotations

import json

import msgspec
import pytest

from engine.protocol.config_loading import ConfigError, dump_config, load_config, read_config_file
from engine.protocol.node_memory import PlacementError, measured_learner_memory
from engine.protocol.placement import (
    WORKER_PLACEMENT_ENV,
    apply_plan,
    apply_worker_placement,
    format_plan,
    plan_placement,
    plan_record,
    read_plan,
    worker_env,
)

def _config(*overrides, preset="default"):
    return load_config(preset, None, ['inference.backend="vllm"', *overrides])


def _plan(model, gpus, *overrides, preset="default", memory=80.0):
    return plan_placement(_config(*overrides, preset=preset), model, gpus=gpus, gpu_memory_gib=memory)


def _engines(plan):
    return [(p.worker_id, p.gpus, p.sleeps) for p in plan.workers]


def _one_line(exc) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_no_gpu_leaves_the_cpu_as_it_was(qwen3_4b):
    config = _config("run.max_staleness=2", "worker.count=2")
    before = dump_config(config)
    plan = plan_placement(config, qwen3_4b, gpus=0)
    apply_plan(config, plan)
    assert plan.layout == "cpu" and dump_config(config) == before
    assert worker_env(plan, "w0") == {}


@pytest.mark.parametrize("staleness", [0, 2])
def test_one_gpu_is_time_shared_whatever_the_staleness(qwen3_4b, staleness):
    plan = _plan(qwen3_4b, 1, f"run.max_staleness={staleness}")
    assert plan.layout == "time-shared" and plan.time_shared
    assert _engines(plan) == [("w0", [0], True)] and plan.learner.gpus == [0]
    # vLLM's share leaves room for the learner's state that stays on the GPU between updates
    (engine,) = plan.workers
    assert engine.gpu_memory_utilization < 0.85
    assert "first" in plan.start_order and "sleep" in plan.start_order


def test_two_gpus_synchronous_are_time_shared_asynchronous_split(qwen3_4b):
    sync = _plan(qwen3_4b, 2, "run.max_staleness=0")
    assert sync.layout == "time-shared"
    assert _engines(sync) == [("w0", [0], True), ("w1", [1], True)] and sync.learner.gpus == [0, 1]
    asynchronous = _plan(qwen3_4b, 2, "run.max_staleness=2")
    assert asynchronous.layout == "split" and not asynchronous.time_shared
    assert _engines(asynchronous) == [("w0", [0], False)] and asynchronous.learner.gpus == [1]


def test_eight_gpus_synchronous_is_the_reference_layout(qwen3_4b):
    plan = _plan(qwen3_4b, 8, "run.max_staleness=0")
    assert plan.layout == "time-shared"
    assert _engines(plan) == [(f"w{i}", [i], True) for i in range(8)]  # data-parallel engines, one GPU each
    assert plan.learner.gpus == list(range(8))
    text = format_plan(plan)
    assert text.startswith("placement: time-shared on 8 GPU(s) of 80 GiB") and text.count("worker-w") == 8


def test_eight_gpus_asynchronous_split_into_disjoint_engine_groups(qwen3_4b):
    plan = _plan(qwen3_4b, 8, "run.max_staleness=4")
    assert plan.layout == "split"
    assert _engines(plan) == [(f"w{i}", [i], False) for i in range(4)] and plan.learner.gpus == [4, 5, 6, 7]
    grouped = _plan(qwen3_4b, 8, "run.max_staleness=4", "inference.tensor_parallel=2")
    assert [p.gpus for p in grouped.workers] == [[0, 1], [2, 3]]
    assert all(p.tensor_parallel == 2 for p in grouped.workers)
    used = [g for p in grouped.workers for g in p.gpus]
    assert len(used) == len(set(used)) and not set(used) & set(grouped.learner.gpus)


def test_explicit_counts_and_lists_win(qwen3_4b):
    plan = _plan(qwen3_4b, 8, "run.max_staleness=4", "learner.world_size=2", "worker.count=3")
    assert plan.learner.gpus == [6, 7] and [p.gpus for p in plan.workers] == [[0], [1], [2]]
    assert any("idle" in note for note in plan.notes)
    listed = _plan(qwen3_4b, 4, "run.max_staleness=4", "inference.gpus=[2, 3]", "learner.gpus=[0]", "learner.world_size=1")
    assert [p.gpus for p in listed.workers] == [[2], [3]] and listed.learner.gpus == [0]
    shared = _plan(qwen3_4b, 2, 'inference.placement="time-shared"', "inference.gpus=[0, 1]", "learner.gpus=[0, 1]", "learner.world_size=2")
    assert shared.layout == "time-shared" and _engines(shared) == [("w0", [0], True), ("w1", [1], True)]


def test_overlapping_lists_are_refused_in_one_line():
    with pytest.raises(ConfigError) as exc:
        _config("inference.gpus=[0, 1]", "learner.gpus=[1]")
    assert "share GPU [1]" in _one_line(exc) and 'inference.placement = "time-shared"' in str(exc.value)


def test_stacked_engines_are_refused_in_one_line(qwen3_4b):
    with pytest.raises(PlacementError) as exc:
        _plan(qwen3_4b, 2, "run.max_staleness=2", "worker.count=2")  # the split leaves one generation GPU
    assert "worker.count = 2" in _one_line(exc) and "stack" in str(exc.value) and "at most 1" in str(exc.value)
    with pytest.raises(ConfigError) as exc:  # the same, seen without the node
        _config("inference.gpus=[0]", "worker.count=2")
    assert "stack" in _one_line(exc)


def test_a_plan_that_does_not_fit_is_refused_in_one_line(qwen3_4b):
    # The paper preset: 32k-token micro-batches; without activation checkpointing the learner's activations
    # alone pass an 80 GB GPU, at any world size (est.); with it (the preset's) the plan fits on 8.
    with pytest.raises(PlacementError) as exc:
        _plan(qwen3_4b, 8, "learner.activation_checkpointing=false", preset="paper")
    line = _one_line(exc)
    assert "the learner needs about" in line and "learner.micro_batch_tokens" in line and "checkpoint activations" in line
    assert _plan(qwen3_4b, 8, preset="paper").learner.memory_gib < 80 * 0.95
    # the learner's measured figure (learner/memory_plan.py, as `up` passes it) replaces the estimate
    measured = measured_learner_memory({"resident_bytes": 8 << 30, "peak_bytes": 100 << 30, "parts": {"activations": 92 << 30}})
    with pytest.raises(PlacementError) as exc:
        plan_placement(_config(preset="paper"), qwen3_4b, gpus=8, gpu_memory_gib=80.0, learner_mem=measured)
    assert "about 100.0 GiB" in _one_line(exc)
    # vLLM on a small GPU: the weights leave no KV cache for one context
    with pytest.raises(PlacementError) as exc:
        _plan(qwen3_4b, 2, "run.max_staleness=2", memory=10.0)
    assert "vLLM on GPU 0 does not fit" in _one_line(exc) and "inference.tensor_parallel" in str(exc.value)
    # a split with every GPU for the learner, and a GPU index the node does not show
    with pytest.raises(PlacementError) as exc:
        _plan(qwen3_4b, 2, 'inference.placement="split"', "learner.world_size=2")
    assert "no GPU for generation" in _one_line(exc)
    with pytest.raises(PlacementError) as exc:
        _plan(qwen3_4b, 2, "inference.gpus=[3]")
    assert "does not show" in _one_line(exc)


def test_split_needs_two_gpus(qwen3_4b):
    with pytest.raises(PlacementError) as exc:
        _plan(qwen3_4b, 1, 'inference.placement="split"')
    assert "time-shared" in _one_line(exc)


def test_the_applied_plan_is_what_the_processes_read_back(qwen3_4b, tmp_path):
    config = _config("run.max_staleness=0")
    plan = plan_placement(config, qwen3_4b, gpus=8, gpu_memory_gib=80)
    apply_plan(config, plan)
    assert config.learner.gpus == list(range(8)) and config.learner.world_size == 8 and config.worker.count == 8
    (tmp_path / "config.toml").write_text(dump_config(config))
    again = read_config_file(tmp_path / "config.toml")  # --resume, the learner and the workers read it back
    assert plan_placement(again, qwen3_4b, gpus=8, gpu_memory_gib=80).processes == plan.processes
    assert read_plan(json.loads(json.dumps(plan_record(plan)))) == plan  # through run.json
    assert read_plan(None) is None and read_plan({"layout": "nonsense"}) is None


def test_a_worker_takes_its_gpus_and_share_from_its_environment(qwen3_4b):
    plan = _plan(qwen3_4b, 8, "run.max_staleness=4", "inference.tensor_parallel=2")
    env = worker_env(plan, "w1")
    config = _config()
    placed = apply_worker_placement(config, env)
    assert placed.gpus == [2, 3] and config.inference.gpus == [2, 3] and not placed.sleep_mode
    assert apply_worker_placement(_config(), {}) is None  # a worker attached by hand keeps its config
    with pytest.raises(PlacementError) as exc:
        apply_worker_placement(_config(), {WORKER_PLACEMENT_ENV: '{"gpus": [0]}'})
    assert WORKER_PLACEMENT_ENV in _one_line(exc)
    bad = msgspec.json.encode({"gpus": [-1], "gpu_memory_utilization": 0.5, "sleep_mode": True}).decode()
    with pytest.raises(PlacementError):
        apply_worker_placement(_config(), {WORKER_PLACEMENT_ENV: bad})
