"""What the learner refuses to train on or to publish: nothing non-finite reaches the weights or leaves as a policy.

- `batch_problem(samples, vocab_size)`: a batch with a sample the learner cannot train on (a token id outside the
  embedding, a non-finite advantage, reward, temperature or log-prob, a loss mask that is not 0/1, arrays of
  different lengths; `engine.protocol.sample_values.sample_problem`, the check the engine makes of every worker result). The
  engine checks too, but the store may hold a batch recorded before it did, which `--resume` sends again.
  learner/train.py answers such a batch without an update (`refused_metrics`) and still publishes the next version
  (the same weights): batch i makes version i + 1, so the engine's bookkeeping, and every later resume, stays as
  it is; the refusal is in the metrics (`refused_batch: 1`) and the learner log.
- A step whose loss or gradient is not finite is skipped (learner/trainer.py `_step`): gradients zeroed, no
  optimizer step, `skipped_nonfinite` in the metrics.
- `check_publishable(trainer)`: before `publish`, every parameter finite, else `NonFiniteWeights` (the learner
  fails loudly instead of publishing NaN). Checked at every publish for models up to `CHECK_EVERY_PUBLISH_PARAMS`
  parameters (one pass over the weights), for bigger ones only after an update that skipped a step.
"""

from __future__ import annotations

import sys

import torch

from engine.protocol.errors import RunFailed
from engine.protocol.messages import Sample
from engine.protocol.sample_values import sample_problem

CHECK_EVERY_PUBLISH_PARAMS = 2_000_000_000


class NonFiniteWeights(RunFailed, RuntimeError):
    """A parameter became NaN or infinite: the learner stops rather than publish it."""


def vocab_size(model) -> int | None:
    """The number of rows of the model's input embedding: every token id must be below it."""
    try:
        return int(model.get_input_embeddings().num_embeddings)
    except (AttributeError, TypeError):
        size = getattr(getattr(model, "config", None), "vocab_size", None)
        return int(size) if size else None


def batch_problem(samples: list[Sample], vocab: int | None) -> str | None:
    for sample in samples:
        if problem := sample_problem(sample, vocab_size=vocab):
            return f"sample {sample.sample_id[:60]}: {problem}"
    return None


def refused_metrics(samples: list[Sample], problem: str, step: int) -> dict[str, float]:
    print(f"learner: refused the batch of step {step} ({len(samples)} samples), no update: {problem}", file=sys.stderr, flush=True)
    return {
        "refused_batch": 1.0, "loss": 0.0, "samples": float(len(samples)), "trained_samples": 0.0,
        "optimizer_step": 0.0, "skipped_nonfinite": 0.0,
    }


def weights_finite(trainer) -> bool:
    """Whether every parameter (this rank's shards, then all ranks) is finite."""
    bad = torch.zeros(1, dtype=torch.float64, device=trainer.device)
    with torch.no_grad():
        for p in trainer.model.parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            if local.numel() and not bool(torch.isfinite(local).all()):
                bad += 1
    return float(trainer.dist.all_reduce_(bad)) == 0.0


def check_publishable(trainer) -> None:
    """Raise NonFiniteWeights rather than publish a non-finite parameter (see the module docstring for when)."""
    skipped = trainer.skipped_nonfinite
    if getattr(trainer, "_skipped_at_last_check", 0) == skipped and trainer_parameters(trainer) > CHECK_EVERY_PUBLISH_PARAMS:
        return
    trainer._skipped_at_last_check = skipped
    if not weights_finite(trainer):
        raise NonFiniteWeights(f"refusing to publish policy version {trainer.version + 1}: a parameter is NaN or infinite")


def trainer_parameters(trainer) -> int:
    count = getattr(trainer, "_parameter_count", None)
    if count is None:
        count = trainer._parameter_count = sum(p.numel() for p in trainer.model.parameters())
    return count
