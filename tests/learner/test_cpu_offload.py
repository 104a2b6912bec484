"""learner.cpu_offload (learner/distributed.py): FSDP2's CPU offload policy on one process, in a process group of
one, trains exactly as the plain learner does. On the CPU the policy has nothing to move, but every call is the
one a GPU run makes (the group of one, fully_shard with the policy, AdamW on offloaded DTensor shards, the full
state dict gathered to publish and checkpoint); on a GPU the shards would sit in pinned host RAM."""

import pytest
import torch
import torch.distributed
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule

from engine.protocol.config import LearnerConfig
from learner.distributed import Distributed, init_distributed, shard_model
from learner.trainer import Trainer
from tests.learner.learner_helpers import random_batch

CONFIG = LearnerConfig(lora_rank=0, learning_rate=1e-3, micro_batch_tokens=64, device="cpu")


@pytest.fixture
def group_of_one():
    dist = init_distributed("cpu", cpu_offload=True)
    assert dist.world_size == 1 and torch.distributed.is_initialized()
    yield dist
    dist.close()
    assert not torch.distributed.is_initialized()


def _weights(trainer):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    if isinstance(trainer.model, FSDPModule):
        return get_model_state_dict(trainer.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_offloaded_updates_equal_the_plain_learners(tiny_model_path, group_of_one, dtype):
    plain = Trainer(tiny_model_path, CONFIG, seed=0, dtype=dtype)
    plain_losses = [plain.update(random_batch(step))["loss"] for step in range(3)]
    plain_weights = _weights(plain)
    offloaded = Trainer(tiny_model_path, msgspec_replace(CONFIG, cpu_offload="on"), seed=0, dtype=dtype, distributed=group_of_one)
    assert isinstance(offloaded.model, FSDPModule)
    assert isinstance(offloaded.model._get_fsdp_state()._fsdp_param_group.offload_policy, CPUOffloadPolicy)
    losses = [offloaded.update(random_batch(step))["loss"] for step in range(3)]
    assert losses == pytest.approx(plain_losses, rel=1e-4, abs=1e-6)
    weights = _weights(offloaded)
    assert weights.keys() == plain_weights.keys()
    for name, value in plain_weights.items():
        torch.testing.assert_close(weights[name], value, rtol=1e-4, atol=1e-6, msg=name)
    states = [v for state in offloaded.optimizer.state.values() for v in state.values() if v.is_floating_point() and v.ndim]
    assert states and {v.dtype for v in states} == {torch.float32}  # AdamW's moments: fp32, wherever they live


def test_offloaded_versions_publish_and_checkpoints_resume(tiny_model_path, group_of_one, tmp_path):
    from transformers import AutoModelForCausalLM

    config = msgspec_replace(CONFIG, cpu_offload="on")
    trainer = Trainer(tiny_model_path, config, seed=0, dtype="float32", distributed=group_of_one)
    trainer.update(random_batch(0))
    folder = trainer.publish(tmp_path / "policy", keep=2)
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    trained = _weights(trainer)
    for name, value in loaded.state_dict().items():
        if name in trained:
            torch.testing.assert_close(value, trained[name], msg=name)
    trainer.save_checkpoint(tmp_path / "checkpoint", step=1)
    resumed = Trainer(tiny_model_path, config, seed=1, dtype="float32", distributed=group_of_one)
    assert resumed.load_checkpoint(tmp_path / "checkpoint") == 1
    # The next update from the checkpoint (weights and AdamW's offloaded moments) is the one the trainer makes.
    assert resumed.update(random_batch(1))["loss"] == pytest.approx(trainer.update(random_batch(1))["loss"], rel=1e-6)
    for name, value in _weights(trainer).items():
        torch.testing.assert_close(_weights(resumed)[name], value, msg=name)


def test_offload_without_a_process_group_is_refused_with_the_fix(tiny_model_path):
    assert not torch.distributed.is_initialized()
    with pytest.raises(ValueError, match=r"init_distributed\(\.\.\., cpu_offload=True\)"):
        shard_model(torch.nn.Linear(2, 2), Distributed(), cpu_offload=True)


def msgspec_replace(config, **changes):
    import msgspec

    return msgspec.structs.replace(config, **changes)
