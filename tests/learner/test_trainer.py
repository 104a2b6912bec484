"""The trainer: mixed-role batches, per-role losses, publishing and checkpoints that transformers loads."""

import pytest
import torch

from engine.config import LearnerConfig
from engine.messages import Sample
from learner.trainer import Trainer
from storage.records import pack_floats, pack_ints, pack_mask


def _sample(role, tokens, advantage, sample_id):
    n = len(tokens)
    return Sample(
        sample_id=sample_id, role=role, env_id="e", skill="k", arm="design" if role == "designer" else "hint", step=0,
        tokens=pack_ints(tokens), loss_mask=pack_mask([0, 0] + [1] * (n - 2)), logprobs=pack_floats([0.0, 0.0] + [-8.3] * (n - 2)),
        versions=pack_ints([-1, -1] + [0] * (n - 2)), reward=0.0, advantage=advantage, temperature=1.0,
    )


@pytest.mark.parametrize("objective", ["decoupled_ppo", "tis", "icepop"])
def test_mixed_roles_update_and_publish(tiny_model_path, tmp_path, objective):
    trainer = Trainer(tiny_model_path, LearnerConfig(objective=objective, learning_rate=1e-3, micro_batch_tokens=16))
    samples = [
        _sample("agent", [5, 6, 7, 8, 9], 1.0, "a1"),
        _sample("agent", [5, 6, 10, 11], -1.0, "a2"),
        _sample("agent", [5, 6, 12], 0.0, "a3"),  # zero advantage: counted in the token mean, not run
        _sample("designer", [1, 2, 3, 4, 5, 6, 7], 0.5, "d1"),
    ]
    metrics = trainer.update(samples)
    assert metrics["trained_samples"] == 3 and metrics["zero_advantage_samples"] == 1
    assert metrics["loss"] == pytest.approx(metrics["loss_agent"] + metrics["loss_designer"], abs=1e-6)
    assert metrics["staleness_0"] == 3 + 2 + 5
    folder = trainer.publish(tmp_path / "policy", keep=2)
    assert folder.name == "v000001" and (folder / "model.safetensors").exists()
    checkpoint = trainer.save_checkpoint(tmp_path / "ckpt", step=0)
    state = torch.load(checkpoint / "trainer_state.pt", weights_only=False)
    assert state["version"] == 1 and state["updates"] == 1


def test_kl_to_reference_loads_a_frozen_copy(tiny_model_path):
    trainer = Trainer(tiny_model_path, LearnerConfig(kl_coef=0.1, learning_rate=1e-3))
    assert trainer.reference is not None and not any(p.requires_grad for p in trainer.reference.parameters())
    metrics = trainer.update([_sample("agent", [5, 6, 7, 8], 1.0, "a")])
    assert metrics["kl_ref"] == pytest.approx(0.0, abs=1e-6)  # before the step the policy is the reference
