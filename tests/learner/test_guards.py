"""Nothing non-finite is trained or published (learner/guards.py, learner/trainer.py, learner/train.py)."""

import math

import msgspec
import pytest
import torch

from engine.protocol.config import LearnerConfig
from engine.protocol.config_loading import load_config
from engine.protocol.messages import TrainBatch
from engine.protocol.paths import RunPaths
from learner.guards import NonFiniteWeights
from learner.train import apply_batch
from learner.trainer import Trainer
from tests.learner.learner_helpers import make_sample


def _weights(trainer):
    return {name: p.detach().clone() for name, p in trainer.model.named_parameters()}


def _unchanged(before, trainer) -> bool:
    return all(torch.equal(before[name], p.detach()) for name, p in trainer.model.named_parameters())


@pytest.fixture
def trainer(tiny_model_path):
    return Trainer(tiny_model_path, LearnerConfig(lora_rank=0, learning_rate=1e-2, micro_batch_tokens=64))


GOOD = [make_sample("agent", [5, 6, 7, 8, 9], 1.0, "a1"), make_sample("agent", [5, 6, 10, 11], -1.0, "a2")]


@pytest.mark.parametrize(
    "bad",
    [
        make_sample("agent", [5, 6, 7, 8], math.nan, "nan-advantage"),
        make_sample("agent", [5, 6, 7, 4096], 1.0, "out-of-range"),  # the tiny model's vocabulary is 4096
        make_sample("agent", [5, 6, 7, -3], 1.0, "negative-id"),
    ],
)
def test_a_batch_the_learner_cannot_train_on_is_refused_and_the_version_still_advances(trainer, tmp_path, bad):
    paths = RunPaths(tmp_path / "run")
    paths.policy.mkdir(parents=True)
    before = _weights(trainer)
    metrics, path = apply_batch(trainer, paths, load_config(), TrainBatch(step=0, samples=[*GOOD, bad], checkpoint=False))
    assert metrics["refused_batch"] == 1.0 and metrics["optimizer_step"] == 0.0
    assert _unchanged(before, trainer) and trainer.optimizer_steps == 0
    assert trainer.version == 1 and path.name == "v000001" and (path / "model.safetensors").exists()
    metrics, _ = apply_batch(trainer, paths, load_config(), TrainBatch(step=1, samples=GOOD, checkpoint=False))
    assert "refused_batch" not in metrics and metrics["optimizer_step"] == 1.0 and not _unchanged(before, trainer)


def test_a_non_finite_loss_skips_the_step_and_says_so(trainer, capsys):
    before = _weights(trainer)
    metrics = trainer.update([*GOOD, make_sample("agent", [5, 6, 7, 8], math.inf, "inf")])  # past the batch check
    assert metrics["skipped_nonfinite"] == 1.0 and metrics["optimizer_step"] == 0.0
    assert math.isfinite(metrics["loss"]) and math.isfinite(metrics["grad_norm"])
    assert _unchanged(before, trainer) and all(p.grad is None for p in trainer.model.parameters())
    assert "skipped an optimizer step" in capsys.readouterr().err
    metrics = trainer.update(GOOD)  # the next batch trains as usual
    assert metrics["skipped_nonfinite"] == 0.0 and metrics["optimizer_step"] == 1.0
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_only_the_mini_batch_with_the_bad_sample_is_skipped(tiny_model_path):
    trainer = Trainer(tiny_model_path, LearnerConfig(lora_rank=0, learning_rate=1e-2, micro_batch_tokens=64, mini_batches=2))
    metrics = trainer.update([*GOOD, make_sample("agent", [5, 6, 7, 8], math.nan, "nan"), make_sample("agent", [5, 6, 12], 1.0, "a3")])
    assert metrics["skipped_nonfinite"] == 1.0 and metrics["optimizer_step"] == 1.0 and math.isfinite(metrics["loss"])
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_non_finite_weights_are_never_published(trainer, tmp_path):
    with torch.no_grad():
        next(trainer.model.parameters()).view(-1)[0] = math.nan
    with pytest.raises(NonFiniteWeights, match="refusing to publish policy version 1"):
        trainer.publish(tmp_path / "policy", keep=2)
    assert trainer.version == 0 and not list((tmp_path / "policy").glob("v*"))


def test_a_stored_batch_with_an_advantage_field_that_is_not_a_number_is_refused(trainer, tmp_path):
    paths = RunPaths(tmp_path / "run")
    paths.policy.mkdir(parents=True)
    bad = msgspec.structs.replace(GOOD[0], sample_id="x", reward=math.nan)
    metrics, _ = apply_batch(trainer, paths, load_config(), TrainBatch(step=0, samples=[bad], checkpoint=False))
    assert metrics["refused_batch"] == 1.0
