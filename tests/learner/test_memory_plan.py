"""The learner's memory plan (learner/memory_plan.py): Qwen3-4B at the paper preset's micro-batch (32768 tokens)
fits 80 GB GPUs with activation checkpointing (one GPU by offloading the fp32 state to host RAM) and is refused
without. The activation figure is measured (learner/activation_memory.py; tests/learner/test_activation_memory.py
checks the count against a real run's)."""

import json
from pathlib import Path

import pytest

from engine.protocol.config import Config, LearnerConfig, ModelConfig, ObjectiveConfig
from engine.tools.learner_memory import check_learner_memory, memory_plan_command, resolve_offload
from learner import memory_plan
from learner.activation_memory import measure_activations
from learner.memory_plan import GIB, choose_offload, load_model_config, model_shape, plan_memory, refusal, replan

QWEN3_4B = Path(__file__).parent / "data" / "qwen3-4b-config.json"  # the published config (data/SOURCES.md)
PAPER_TOKENS = 32768  # engine/protocol/presets.py: PAPER's learner.micro_batch_tokens


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
    """As `up` plans the paper preset (learner.cpu_offload = "auto": offloaded only when nothing else fits)."""
    shape, figure = qwen3_4b
    settings = dict(world_size=gpus, micro_batch_tokens=PAPER_TOKENS, gpu_gib=80, host_gib=1024)
    without = choose_offload(shape, figure, checkpointing=False, **settings)
    with_ = choose_offload(shape, figure, checkpointing=True, **settings)
    assert not without.fits and without.peak_bytes > 150 * GIB  # every layer's activations: FSDP does not shard them
    reason = refusal(without, shape, figure)
    assert "\n" not in reason and reason.startswith("the learner needs ")
    assert with_.fits, with_.summary()
    assert "enable learner.activation_checkpointing" in reason
    # One GPU: fp32 weights, gradients and AdamW alone are 16 bytes a parameter (60 GiB), which with a 32k-token
    # micro-batch does not fit one 80 GB GPU even checkpointed: the state goes to host RAM (64 GB on this node).
    assert with_.cpu_offload == (gpus == 1)
    assert without.peak_bytes - with_.peak_bytes > 150 * GIB  # the activations checkpointing saves


def test_one_gpu_without_offload_or_host_ram_is_refused_naming_the_fixes(qwen3_4b):
    shape, figure = qwen3_4b
    kept = plan_memory(shape, figure, world_size=1, micro_batch_tokens=PAPER_TOKENS, checkpointing=True, gpu_gib=80)
    assert not kept.fits and kept.peak_bytes > 72 * GIB
    reason = refusal(kept, shape, figure)
    assert 'set learner.cpu_offload = "on"' in reason and "raise learner.world_size to 2" in reason
    offloaded = replan(kept, shape, figure, cpu_offload=True)
    assert offloaded.fits and offloaded.peak_bytes < 30 * GIB and offloaded.resident_bytes == memory_plan.FIXED_BYTES
    assert offloaded.host_bytes == 16 * shape.parameters  # fp32 weights, gradients, two moments
    small_node = replan(kept, shape, figure, cpu_offload=True, host_gib=64)  # 80 % of 64 GiB < 60 GiB
    assert not small_node.fits and not small_node.host_fits
    reason = refusal(small_node, shape, figure)
    assert reason.startswith("the offloaded state needs 59.9 GiB of host RAM")
    assert 'raise learner.world_size to 2 with learner.cpu_offload = "off"' in reason
    assert choose_offload(shape, figure, world_size=1, micro_batch_tokens=PAPER_TOKENS, checkpointing=True, gpu_gib=80,
                          host_gib=64).cpu_offload is False  # offloading would not fit either: the plain plan, refused


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
                    "32768", "--gpu-gb", "auto", "--dtype", "bfloat16", "--gpus", "4,5,6,7", "--checkpointing", "--kl-reference",
                    "--cpu-offload", "auto"]


def test_auto_offload_is_chosen_by_the_plan_and_written_into_the_config(capsys):
    code = memory_plan.main(["--model", str(QWEN3_4B), "--world-size", "1", "--gpu-gb", "80", "--micro-batch-tokens",
                             str(PAPER_TOKENS), "--checkpointing", "--cpu-offload", "auto", "--host-gb", "1024"])
    out, _ = capsys.readouterr()
    record = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and record["fits"] and record["cpu_offload"] is True
    assert "learner.cpu_offload = auto: on" in out and "host RAM, every rank" in out
    config = Config(learner=LearnerConfig(cpu_offload="auto"))
    resolve_offload(config, record)
    assert config.learner.cpu_offload == "on"  # what the learner reads from config.toml
    resolve_offload(config := Config(learner=LearnerConfig(cpu_offload="auto")), None)
    assert config.learner.cpu_offload == "auto"  # nothing planned (the CPU): the learner treats auto as off
    resolve_offload(config := Config(learner=LearnerConfig(cpu_offload="off")), record)
    assert config.learner.cpu_offload == "off"  # an explicit choice stays
