"""What the node shows and what the models take (engine/protocol/node_memory.py): the GPUs from nvidia-smi (faked
here by a function returning its lines, or SPADE_FAKE_GPUS), a model's shapes from its config.json (Qwen3-4B's
published one), and the learner's simple memory estimate, with and without learner.cpu_offload."""

import pytest

from engine.protocol.config_loading import load_config
from engine.protocol.node_memory import FAKE_GPUS_ENV, PlacementError, learner_memory, model_shape, visible_gpus



def test_the_model_shape_comes_from_config_json(qwen3_4b):
    shape = model_shape(qwen3_4b)
    assert 3.9e9 < shape.parameters < 4.1e9  # "about 4.0 B"
    assert shape.kv_bytes_per_token == 2 * 36 * 8 * 128 * 2
    assert model_shape(qwen3_4b.parent / "missing") is None


def test_visible_gpus_from_nvidia_smi_and_cuda_visible_devices():
    smi = lambda: ["81559", "81559", "81559", "81559"]  # noqa: E731 (MiB, one line per GPU)
    count, size = visible_gpus({}, smi)
    assert count == 4 and 79 < size < 80
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1,3"}, smi)[0] == 2
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, smi)[0] == 0
    assert visible_gpus({}, lambda: None) == (0, 0.0)  # no nvidia-smi: the CPU
    assert visible_gpus({FAKE_GPUS_ENV: "8x80"}, lambda: None) == (8, 80.0)
    with pytest.raises(PlacementError):
        visible_gpus({FAKE_GPUS_ENV: "eight"}, lambda: None)


def test_the_learner_estimate_leaves_the_offloaded_state_off_the_gpu(qwen3_4b):
    shape = model_shape(qwen3_4b)
    kept = learner_memory(shape, load_config("paper", None, []), ranks=1)
    offloaded = learner_memory(shape, load_config("paper", None, ['learner.cpu_offload="on"']), ranks=1)
    assert kept.resident_gib > 40 and offloaded.resident_gib == 0  # 12 bytes a parameter stay between updates
    assert kept.peak_gib - offloaded.peak_gib == pytest.approx(16 * shape.parameters / (1 << 30))  # and gradients
    assert "host RAM" in offloaded.detail
