"""Builders the learner tests share (and the inference tests, for a trained tiny model): samples, random
batches, and the resume-is-bit-for-bit check that every checkpointing trainer must pass."""

import random

import numpy as np
import torch

from engine.protocol.messages import Sample, pack_floats, pack_ints, pack_mask
from learner.trainer import Trainer


def make_sample(role, tokens, advantage, sample_id):
    n = len(tokens)
    return Sample(
        sample_id=sample_id, role=role, env_id="e", skill="k", arm="design" if role == "designer" else "hint", step=0,
        tokens=pack_ints(tokens), loss_mask=pack_mask([0, 0] + [1] * (n - 2)), logprobs=pack_floats([0.0, 0.0] + [-8.3] * (n - 2)),
        versions=pack_ints([-1, -1] + [0] * (n - 2)), reward=0.0, advantage=advantage, temperature=1.0,
    )


def random_batch(seed: int, n: int = 6) -> list[Sample]:
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n):
        length = int(rng.integers(6, 16))
        role = "designer" if i % 3 == 0 else "agent"
        samples.append(Sample(
            sample_id=f"{seed}-{i}", role=role, env_id="e", skill="k", arm="hint", step=seed,
            tokens=pack_ints(rng.integers(5, 4000, size=length).tolist()), loss_mask=pack_mask([0, 0] + [1] * (length - 2)),
            logprobs=pack_floats([0.0, 0.0] + (-8.3 + 0.2 * rng.standard_normal(length - 2)).tolist()),
            versions=pack_ints([-1, -1] + [0] * (length - 2)), reward=0.0, advantage=float(rng.choice([-1.0, 0.5, 1.0])),
        ))
    return samples


def _random_draws():
    return torch.rand(3), random.random(), np.random.rand()


def _metrics_without_timing(metrics):
    return {k: v for k, v in metrics.items() if k not in ("learner_seconds", "learner_tokens_per_s")}


def resume_matches_an_uninterrupted_run(model_path, config, tmp_path):
    """Update, checkpoint, update again; a trainer resumed from the checkpoint (with another seed: everything
    must come from the file) makes the same second update, bit for bit. Returns (folder, resumed, its metrics)."""
    first, second = random_batch(1), random_batch(2)
    uninterrupted = Trainer(model_path, config, seed=3)
    uninterrupted.update(first)
    uninterrupted.publish(tmp_path / "policy", keep=2)
    folder = uninterrupted.save_checkpoint(tmp_path / "ckpt", step=1)
    draws = _random_draws()
    expected_metrics = uninterrupted.update(second)

    resumed = Trainer(model_path, config, seed=99)
    assert resumed.load_checkpoint(folder) == 1
    assert (resumed.version, resumed.updates, resumed.optimizer_steps) == (1, 1, 2)
    resumed_draws = _random_draws()
    assert torch.equal(draws[0], resumed_draws[0]) and draws[1:] == resumed_draws[1:]
    metrics = resumed.update(second)

    for (name, a), (_, b) in zip(uninterrupted.model.named_parameters(), resumed.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name
    assert _metrics_without_timing(metrics) == _metrics_without_timing(expected_metrics)
    assert resumed.scheduler.state_dict() == uninterrupted.scheduler.state_dict()
    return folder, resumed, metrics
