"""`up`'s plan for the node (engine/tools/node_plan.py): on the CPU nothing changes; on GPUs (faked with
SPADE_FAKE_GPUS, the learner's measured plan stood in for by its JSON record, which learner/memory_plan.py prints on a
real node) the plan's counts and the learner's offload choice go into the config, and the time-shared engine is
sized around what the learner keeps on the GPU."""

import pytest

from engine.protocol.config_loading import load_config
from engine.protocol.placement import read_plan
from engine.tools import node_plan

GIB = 1 << 30


class _Paths:
    def __init__(self):
        self.meta = {}

    def update_meta(self, **fields):
        self.meta.update(fields)


def test_on_the_cpu_the_config_is_left_as_it_was(qwen3_4b, monkeypatch, capsys):
    monkeypatch.delenv("SPADE_FAKE_GPUS", raising=False)
    monkeypatch.setattr(node_plan, "check_learner_memory", lambda *a: pytest.fail("nothing to check on the CPU"))
    monkeypatch.setattr("engine.protocol.node_memory._nvidia_smi", lambda: None)
    config = load_config("default", None, [])
    plan = node_plan.plan_node(config, qwen3_4b)
    assert plan.layout == "cpu" and config.learner.cpu_offload == "auto"
    paths = _Paths()
    node_plan.record_plan(paths, plan)
    assert read_plan(paths.meta["placement"]).layout == "cpu" and capsys.readouterr().out == ""


@pytest.mark.parametrize("offloaded", [True, False])
def test_one_gpu_takes_the_learners_measured_plan_and_offload_choice(qwen3_4b, monkeypatch, capsys, offloaded):
    monkeypatch.setenv("SPADE_FAKE_GPUS", "1x80")
    resident = (1 if offloaded else 57) * GIB  # offloaded: the CUDA context only stays between updates
    record = {"resident_bytes": resident, "peak_bytes": 20 * GIB, "parts": {"activations": 18 * GIB}, "cpu_offload": offloaded}
    monkeypatch.setattr(node_plan, "check_learner_memory", lambda config, model_path: record)
    config = load_config("paper", None, ['inference.backend="vllm"'])
    plan = node_plan.plan_node(config, qwen3_4b)
    assert config.learner.cpu_offload == ("on" if offloaded else "off")  # what config.toml gives the learner
    assert plan.layout == "time-shared" and plan.learner.gpus == [0] and config.learner.world_size == 1
    engine = plan.workers[0]
    # The engine's share leaves room for what the learner keeps on the GPU while the engine is awake.
    assert engine.memory_gib + resident / GIB <= 80 * 0.95 + 1e-6
    if offloaded:
        assert engine.gpu_memory_utilization == pytest.approx(config.inference.gpu_memory_utilization)
    else:
        assert engine.gpu_memory_utilization < config.inference.gpu_memory_utilization
    node_plan.record_plan(_Paths(), plan)
    assert "placement: time-shared on 1 GPU(s)" in capsys.readouterr().out
