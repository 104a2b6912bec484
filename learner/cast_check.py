"""The published weights checked against the learner's: the log-probs of a short probe, after the cast.

    trainer.probe = probe_from_rows(rows, trainable)   # in Trainer.update: what the next check scores
    gap = cast_gap(trainer, folder)   # every rank; {"cast_logprob_gap_mean", "cast_logprob_gap_max", "cast_probe_tokens"}

When `model.dtype` is bfloat16 the learner publishes its fp32 master weights cast to bf16 (learner/precision.py),
and a worker loads them in bf16 and computes in bf16. Before a version is published (its folder is still the
temporary one), the learner scores one probe sequence twice: with its own model, as it trains (fp32 masters,
bf16 autocast: the log-probs its objective uses), and with the folder loaded as a worker's transformers backend
loads it (`from_pretrained` in `model.dtype`; for LoRA, the base model in `model.dtype` with the published adapter
merged), and records the mean and max |difference| over the probe's scored tokens in the learner's metrics.

The probe is the first trained sample of the last update, its first PROBE_TOKENS tokens, scored at its loss-mask
tokens (the ones the generator sampled, whose log-probs the objective compares); before any update, or when those
tokens hold no loss-mask token, a fixed text, scored at every token. That is one forward of each model over at
most PROBE_TOKENS tokens; the published model is loaded on rank 0's device for it and dropped afterwards.

Bounds: a mean above MEAN_BOUND (0.25 nats) or a max above MAX_BOUND (3 nats) fails the learner (CastGapTooLarge,
before anything is published). A correct cast of a real model stays well below them: SmolLM2-135M-Instruct on the
CPU, three sampled chat completions of 100-200 tokens, gave a mean of 0.026-0.040 and a max of 0.15-0.19 nats at
the sampled tokens (0.036-0.045 and 0.38 over every token, prompts included); weights that are not the learner's
(a wrong cast, a broken tie, a folder that loads something else) are off by nats. Under FSDP2 (world_size > 1, or cpu_offload)
the learner gathers every weight in bf16, so it computes as the workers' transformers backend does and the gap
is ~0. tests/learner/test_precision.py and test_distributed.py use the same bounds.

With `model.dtype = float32` the cast is the identity and nothing is checked (no metrics): the folder holds
exactly the learner's weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from engine.protocol.errors import RunFailed
from learner.logprobs import sequence_logprobs, token_logprobs

if TYPE_CHECKING:
    from learner.packing import Row
    from learner.trainer import Trainer

PROBE_TOKENS = 256
MEAN_BOUND = 0.25  # nats, mean |learner - published| over the scored tokens
MAX_BOUND = 3.0  # nats, the largest single-token |difference|
PROBE_TEXT = (
    "A policy version is written in the generator's dtype. The learner keeps its master weights in fp32, "
    "computes in bf16, and checks that the weights it published give the log-probs it trains with. "
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))  # 5\n"
)


class CastGapTooLarge(RunFailed, RuntimeError):
    """The published weights' log-probs are too far from the learner's: the learner stops rather than publish them."""


def probe_from_rows(rows: list[Row], trainable: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
    """(token ids, bool positions to score) of the first trained sample, cut to PROBE_TOKENS; None if none."""
    if not trainable:
        return None
    row = rows[trainable[0]]
    ids, mask = row.ids[:PROBE_TOKENS], row.mask[:PROBE_TOKENS] > 0
    return (ids.copy(), mask.copy()) if mask.any() else None


def fixed_probe(tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """PROBE_TEXT as token ids, every token after the first scored."""
    ids = np.asarray(tokenizer(PROBE_TEXT)["input_ids"][:PROBE_TOKENS], dtype=np.int64)
    positions = np.ones(len(ids), dtype=bool)
    positions[0] = False  # the first token has no prediction
    return ids, positions


def load_published(trainer: Trainer, folder: Path):
    """The published folder as a worker's transformers backend loads it (actors/inference/hf.py), on this device."""
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, trainer.dtype)
    if trainer.lora:
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(trainer.model_path, dtype=dtype)
        model = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
    else:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    return model.eval().to(trainer.device)


def cast_gap(trainer: Trainer, folder: Path) -> dict[str, float]:
    """The learner's log-probs of the probe against the published folder's (see the module docstring); every rank
    calls it (the learner's forward is a collective under FSDP), rank 0 loads the folder. Raises CastGapTooLarge."""
    if not trainer.autocast:  # model.dtype float32: published as held, the cast is the identity
        return {}
    ids, positions = trainer.probe if trainer.probe is not None else fixed_probe(trainer.tokenizer)
    tokens = torch.as_tensor(ids, dtype=torch.long, device=trainer.device)[None]
    scored = torch.as_tensor(positions, dtype=torch.bool, device=trainer.device)
    attention = torch.ones_like(tokens)
    with torch.no_grad():
        learner = sequence_logprobs(trainer.model, tokens, attention, None, autocast=trainer.autocast)[0]
    gap = None
    if trainer.dist.is_main:
        published = load_published(trainer, folder)
        with torch.no_grad():
            theirs = token_logprobs(published, tokens, attention, 1.0)[0]
        del published
        diff = (learner.float() - theirs.float()).abs()[scored]
        gap = {"cast_logprob_gap_mean": float(diff.mean()), "cast_logprob_gap_max": float(diff.max()), "cast_probe_tokens": float(diff.numel())}
    gap = trainer.dist.broadcast(gap)
    if gap["cast_logprob_gap_mean"] > MEAN_BOUND or gap["cast_logprob_gap_max"] > MAX_BOUND:
        raise CastGapTooLarge(
            f"refusing to publish policy version {trainer.version}: its {trainer.dtype} weights' log-probs differ from the "
            f"learner's by {gap['cast_logprob_gap_mean']:.3g} nats on average (bound {MEAN_BOUND}), {gap['cast_logprob_gap_max']:.3g} "
            f"at most (bound {MAX_BOUND}) over {int(gap['cast_probe_tokens'])} probe tokens; the unpublished folder is kept: {folder}"
        )
    return gap
