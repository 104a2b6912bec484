"""Checkpoints: Hugging Face folders that resume bit for bit, and the learner process's resume at start."""

import numpy as np
import pytest
import torch

from engine.protocol.config import Config, LearnerConfig
from engine.protocol.messages import TrainBatch
from engine.protocol.paths import RunPaths
from learner.train import apply_batch, resume
from learner.trainer import Trainer
from tests.learner.learner_helpers import random_batch, resume_matches_an_uninterrupted_run

# AdamW with a cosine schedule after warm-up, 2 optimizer steps per batch (so pi_prox is recomputed too).
CONFIG = LearnerConfig(lora_rank=0, learning_rate=1e-3, lr_schedule="cosine", warmup_steps=1, total_steps=8, mini_batches=2, micro_batch_tokens=32)


def test_resume_is_bit_for_bit(tiny_model_path, tmp_path):
    _, _, metrics = resume_matches_an_uninterrupted_run(tiny_model_path, CONFIG, tmp_path)
    assert metrics["learning_rate"] == pytest.approx(1e-3 * 0.5 * (1 + np.cos(np.pi * 2 / 7)))  # step 3 of 8, warm-up 1


def test_checkpoint_folder_loads_with_from_pretrained(tiny_model_path, tmp_path):
    from transformers import AutoModelForCausalLM

    trainer = Trainer(tiny_model_path, CONFIG)
    trainer.update(random_batch(1))
    folder = trainer.save_checkpoint(tmp_path / "ckpt", step=5)
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    assert not (tmp_path / ".tmp-ckpt").exists()
    loaded = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    for name, value in trainer.model.state_dict().items():
        assert torch.equal(loaded[name], value), name
    state = torch.load(folder / "trainer_state.pt", weights_only=True)
    assert (state["step"], state["version"], state["updates"], state["world_size"]) == (5, 0, 1, 1)


def test_load_checkpoint_names_a_folder_that_is_not_one(tiny_model_path, tmp_path):
    trainer = Trainer(tiny_model_path, CONFIG)
    with pytest.raises(FileNotFoundError, match=r"is not a learner checkpoint: trainer_state.pt is missing$"):
        trainer.load_checkpoint(tmp_path)


def test_learner_resumes_from_latest_at_start(tiny_model_path, tmp_path):
    paths = RunPaths(tmp_path / "run")
    paths.policy.mkdir(parents=True)
    paths.checkpoints.mkdir(parents=True)
    config = Config(learner=LearnerConfig(lora_rank=0, learning_rate=1e-3, checkpoint_every=2))
    trainer = Trainer(tiny_model_path, config.learner)
    assert resume(trainer, paths, tiny_model_path) == tiny_model_path  # nothing to resume from yet
    apply_batch(trainer, paths, config, TrainBatch(step=0, samples=random_batch(1), checkpoint=False))
    assert not (paths.checkpoints / "latest").exists()
    apply_batch(trainer, paths, config, TrainBatch(step=1, samples=random_batch(2), checkpoint=False))  # version 2: every 2
    assert (paths.checkpoints / "latest").resolve() == paths.checkpoints / "step-000001"

    restarted = Trainer(tiny_model_path, config.learner)
    assert resume(restarted, paths, tiny_model_path) == str(paths.policy_version_dir(2))
    assert restarted.version == 2 and restarted.updates == 2
    for (name, a), (_, b) in zip(trainer.model.named_parameters(), restarted.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name
