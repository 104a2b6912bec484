"""The learner's memory plan (learner/memory_plan.py): the activation count is a real run's, and Qwen3-4B at the
paper preset's micro-batch (32768 tokens) fits 80 GB GPUs with activation checkpointing and is refused without.

The measurement runs the model under FakeTensorMode (no arithmetic); the first test checks that it counts exactly
what a real forward keeps on a narrow Qwen3 slice, so the full-width figure of the second is a measurement."""

import json
from pathlib import Path

import pytest
from transformers import Qwen3Config

from engine.protocol.config import Config, LearnerConfig, ModelConfig, ObjectiveConfig
from engine.tools.learner_memory import check_learner_memory, memory_plan_command
from learner import memory_plan
from learner.memory_plan import GIB, load_model_config, measure_activations, model_shape, plan_memory, refusal

QWEN3_4B = Path(__file__).parent / "data" / "qwen3-4b-config.json"  # the published config (data/SOURCES.md)
PAPER_TOKENS = 32768  # engine/protocol/presets.py: PAPER's learner.micro_batch_tokens


@pytest.mark.parametrize("dtype", ["bfloat16"])
def test_the_fake_count_is_a_real_runs_count(dtype):
    narrow = Qwen3Config(vocab_size=512, hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)
    fake = measure_activations(narrow, dtype=dtype, tokens=(32, 64))
    real = measure_activations(narrow, dtype=dtype, tokens=(32, 64), fake=False)
    assert fake == real
    width = 2 if dtype == "bfloat16" else 4
    assert fake.boundary == width * 128  # a checkpointed layer keeps its input hidden state
    assert fake.layer[1] == 0.0 and fake.layer_padded[1] > 0  # unpadded: linear (flash path); padded: the mask


@pytest.fixture(scope="module")
def qwen3_4b():
    config = load_model_config(QWEN3_4B)
    return model_shape(config), measure_activations(config)


def test_qwen3_4b_shape_and_measured_activations(qwen3_4b):
    shape, figure = qwen3_4b
    assert shape.layers == 36 and shape.hidden == 2560 and shape.vocab == 151936
    assert 4.0e9 < shape.parameters < 4.05e9  # "about 4.0 B" with tied embeddings
    assert figure.boundary == 2 * 2560  # bf16 hidden state per checkpointed layer
    # At least the MLP's three bf16 [tokens, 9728] tensors and the attention's q, k, v, output: over 100 KiB a token.
    assert 100 * 1024 < figure.layer[0] < 400 * 1024


@pytest.mark.parametrize("gpus", [1, 4, 8])
def test_paper_preset_on_80_gb_gpus(qwen3_4b, gpus):
    shape, figure = qwen3_4b
    without = plan_memory(shape, figure, world_size=gpus, micro_batch_tokens=PAPER_TOKENS, checkpointing=False, gpu_gib=80)
    with_ = plan_memory(shape, figure, world_size=gpus, micro_batch_tokens=PAPER_TOKENS, checkpointing=True, gpu_gib=80)
    assert not without.fits and without.peak_bytes > 150 * GIB  # every layer's activations: FSDP does not shard them
    reason = refusal(without, shape, figure, 80)
    assert "\n" not in reason and reason.startswith("the learner needs ")
    if gpus == 1:
        # fp32 weights, gradients and AdamW alone are 16 bytes a parameter (60 GiB): one 80 GB GPU cannot hold them
        # and a 32k-token micro-batch even with checkpointing; the plan says how many GPUs do.
        assert not with_.fits
        assert "raise learner.world_size to 2" in refusal(with_, shape, figure, 80)
    else:
        assert with_.fits, with_.summary()
        assert "enable learner.activation_checkpointing" in reason
    assert without.peak_bytes - with_.peak_bytes > 150 * GIB  # the activations checkpointing saves


def test_cli_prints_the_plan_and_refuses_in_one_line(capsys):
    code = memory_plan.main(["--model", str(QWEN3_4B), "--world-size", "8", "--gpu-gb", "80", "--micro-batch-tokens", str(PAPER_TOKENS)])
    out, err = capsys.readouterr()
    assert code == 3
    record = json.loads(out.strip().splitlines()[-1])
    assert record["fits"] is False and record["world_size"] == 8 and record["peak_bytes"] > record["usable_bytes"]
    assert err.strip() == record["refusal"] and "enable learner.activation_checkpointing" in err


def test_up_skips_the_check_on_the_cpu_and_passes_the_learner_settings():
    config = Config(learner=LearnerConfig(device="cpu"))
    assert check_learner_memory(config, QWEN3_4B.parent) is None  # no child started: the CPU has nothing to check
    config = Config(model=ModelConfig(dtype="bfloat16"), learner=LearnerConfig(
        world_size=4, gpus=[4, 5, 6, 7], micro_batch_tokens=PAPER_TOKENS, activation_checkpointing=True,
        objective=ObjectiveConfig(kl_coef=0.01)))
    argv = memory_plan_command(config, "/models/qwen3-4b", python="py")
    assert argv == ["py", "-m", "learner.memory_plan", "--model", "/models/qwen3-4b", "--world-size", "4", "--micro-batch-tokens",
                    "32768", "--gpu-gb", "auto", "--dtype", "bfloat16", "--gpus", "4,5,6,7", "--checkpointing", "--kl-reference"]
