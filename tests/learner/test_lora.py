"""LoRA (learner.lora_rank > 0): only the adapter trains, only the adapter is published, resume is bit for bit."""

from pathlib import Path

import pytest
import torch

from engine.protocol.config import LearnerConfig, ObjectiveConfig
from learner.trainer import Trainer
from tests.learner.learner_helpers import random_batch, resume_matches_an_uninterrupted_run

LORA = LearnerConfig(
    learning_rate=1e-2, lora_rank=4, lr_schedule="cosine", warmup_steps=1, total_steps=8, mini_batches=2, micro_batch_tokens=32,
)


def _folder_bytes(folder):
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def test_lora_update_trains_only_the_adapter_and_publishes_only_it(tiny_model_path, tmp_path):
    trainer = Trainer(tiny_model_path, LORA, seed=0)
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert len(trainer.optimizer.param_groups[0]["params"]) == len(trainable)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    metrics = trainer.update(random_batch(1))
    assert metrics["optimizer_step"] == 2 and metrics["grad_norm"] > 0
    for name, value in trainer.model.named_parameters():
        if name in trainable:
            if "lora_B" in name:  # B starts at 0 and moves; A moves once B is non-zero (the second step)
                assert not torch.equal(value, before[name]), name
        else:
            assert torch.equal(value, before[name]), name

    folder = trainer.publish(tmp_path / "policy", keep=2)
    names = {f.name for f in folder.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors"} <= names and "model.safetensors" not in names
    full = sum(f.stat().st_size for f in Path(tiny_model_path).glob("*.safetensors"))
    assert _folder_bytes(folder) * 20 < full  # the tiny model: ~120 KB of adapter against ~17 MB of weights


def test_lora_kl_reference_is_the_base_model(tiny_model_path):
    trainer = Trainer(tiny_model_path, LearnerConfig(learning_rate=1e-2, lora_rank=4, objective=ObjectiveConfig(kl_coef=0.1)))
    batch = random_batch(1)
    assert trainer.update(batch)["kl_ref"] == pytest.approx(0.0, abs=1e-6)  # B = 0: the policy is the base
    assert trainer.update(batch)["kl_ref"] > 0.0


def test_lora_with_several_processes_is_refused(tiny_model_path):
    from learner.distributed import Distributed

    dist = Distributed(rank=0, world_size=2, device_type="cpu")  # refused before anything collective happens
    with pytest.raises(NotImplementedError, match="learner.lora_rank > 0 runs on one process only"):
        Trainer(tiny_model_path, LearnerConfig(lora_rank=4), distributed=dist)


def test_lora_resume_is_bit_for_bit(tiny_model_path, tmp_path):
    from transformers import AutoModelForCausalLM

    folder, resumed, _ = resume_matches_an_uninterrupted_run(tiny_model_path, LORA, tmp_path)
    assert (folder / "model.safetensors").is_file() and (folder / "adapter" / "adapter_model.safetensors").is_file()

    # The checkpoint's top-level folder is the merged policy, as from_pretrained loads it.
    merged = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokens = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    with torch.no_grad():
        resumed.load_checkpoint(folder)
        resumed.model.eval()
        expected = resumed.model(input_ids=tokens).logits
        assert torch.allclose(merged(input_ids=tokens).logits, expected, atol=1e-4)

    full = Trainer(tiny_model_path, LearnerConfig(lora_rank=0))
    with pytest.raises(ValueError, match="is a checkpoint of a LoRA adapter, but learner.lora_rank is 0"):
        full.load_checkpoint(folder)
