"""How an update's samples are laid out for the forward passes: unpacked rows, the plan of strided mini-batches split
over the ranks and packed into micro-batches, and a micro-batch as padded tensors (learner/trainer.py runs them).

    rows = [unpack(s) for s in samples]
    plan = plan_mini_batches(rows, trainable, mini_batches=M, world_size=N, micro_batch_tokens=T)
    batch = collate(rows, plan[0].micro[rank][0], device)

Every rank computes the same plan (`split_by_tokens`, learner/distributed.py), so each knows how many passes the
others run; a micro-batch's padded size (rows x longest) stays within `learner.micro_batch_tokens`, and its padding
within `learner.micro_batch_padding` of that size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.protocol.messages import Sample, unpack_floats, unpack_ints, unpack_mask
from learner.distributed import refuse_oversize, split_by_tokens

ROLES = ("agent", "designer")


@dataclass(frozen=True)
class Row:
    """One sample, unpacked once per update."""

    ids: np.ndarray
    mask: np.ndarray  # float32, position 0 already zeroed (it has no prediction)
    behaviour: np.ndarray
    versions: np.ndarray
    advantage: float
    temperature: float
    role: str

    @property
    def length(self) -> int:
        return len(self.ids)


def unpack(sample: Sample) -> Row:
    mask = unpack_mask(sample.loss_mask).astype(np.float32)
    mask[:1] = 0.0
    return Row(
        ids=unpack_ints(sample.tokens).astype(np.int64),
        mask=mask,
        behaviour=unpack_floats(sample.logprobs),
        versions=unpack_ints(sample.versions).astype(np.int64),
        advantage=float(sample.advantage),
        temperature=sample.temperature if sample.temperature > 0 else 1.0,
        role=sample.role,
    )


def micro_batches(indices: list[int], lengths: list[int], max_tokens: int, max_padding: float = 1.0) -> list[list[int]]:
    """Length-sorted greedy packing: a micro-batch's padded size (rows x longest) stays within max_tokens, and its
    padding (padded size less its tokens) within `max_padding` of the padded size."""
    indices = refuse_oversize(indices, lengths, max_tokens)
    batches, current, width, tokens = [], [], 0, 0
    for index in sorted(indices, key=lambda i: (lengths[i], i)):
        n = lengths[index]
        padded = max(width, n) * (len(current) + 1)
        if current and (padded > max_tokens or padded - tokens - n > max_padding * padded):
            batches.append(current)
            current, width, tokens = [], 0, 0
        current.append(index)
        width, tokens = max(width, n), tokens + n
    if current:
        batches.append(current)
    return batches


@dataclass(frozen=True)
class MiniBatch:
    role_tokens: dict[str, float]  # loss-mask tokens per role in the whole mini-batch (the token-mean denominators)
    samples: float  # samples in the whole mini-batch (the per-sample mean's denominator; scaled by sample_norm)
    micro: list[list[list[int]]]  # per rank: its micro-batches (sample indices)

    @property
    def passes(self) -> int:
        """Forward/backward passes every rank runs (the most any rank needs)."""
        return max(len(m) for m in self.micro)

    @property
    def trainable(self) -> bool:
        return self.passes > 0


@dataclass(frozen=True)
class Batch:
    """A micro-batch as right-padded tensors on the device."""

    ids: torch.Tensor
    attention: torch.Tensor
    mask: torch.Tensor
    behaviour: torch.Tensor
    advantages: torch.Tensor
    temperatures: torch.Tensor | None  # [rows, 1, 1]; None when every row samples at temperature 1
    roles: list[str]
    lengths: list[int]


def plan_mini_batches(rows: list[Row], trainable: set[int], *, mini_batches: int, world_size: int, micro_batch_tokens: int,
                      sample_norm: int = 0, micro_batch_padding: float = 1.0) -> list[MiniBatch]:
    """Mini-batches (sample i in mini-batch i mod M), each split over the ranks, then into micro-batches.
    `sample_norm` > 0 stands for the batch's sample count in the per-sample mean's denominators: each mini-batch
    divides by its share of it, its own count times sample_norm / len(rows) (exactly sample_norm with M = 1)."""
    lengths = [r.length for r in rows]
    per_sample = sample_norm / len(rows) if sample_norm > 0 and rows else 1.0
    plan = []
    for first in range(mini_batches):
        members = list(range(first, len(rows), mini_batches))
        role_tokens = {role: 0.0 for role in ROLES}
        for i in members:
            role_tokens[rows[i].role] += float(rows[i].mask.sum())
        train = [i for i in members if i in trainable]
        shares = split_by_tokens([lengths[i] for i in train], world_size)
        micro = [micro_batches([train[j] for j in share], lengths, micro_batch_tokens, micro_batch_padding) for share in shares]
        plan.append(MiniBatch(role_tokens=role_tokens, samples=float(len(members)) * per_sample, micro=micro))
    return plan


def collate(rows: list[Row], micro: list[int], device: torch.device) -> Batch:
    chosen = [rows[i] for i in micro]
    width = max(r.length for r in chosen)
    ids = np.zeros((len(chosen), width), dtype=np.int64)
    attention = np.zeros((len(chosen), width), dtype=np.int64)
    mask = np.zeros((len(chosen), width), dtype=np.float32)
    behaviour = np.zeros((len(chosen), width), dtype=np.float32)
    for row, r in enumerate(chosen):
        ids[row, : r.length] = r.ids
        attention[row, : r.length] = 1
        mask[row, : r.length] = r.mask
        behaviour[row, : r.length] = r.behaviour
    temperatures = [r.temperature for r in chosen]
    return Batch(
        ids=torch.from_numpy(ids).to(device),
        attention=torch.from_numpy(attention).to(device),
        mask=torch.from_numpy(mask).to(device),
        behaviour=torch.from_numpy(behaviour).to(device),
        advantages=torch.tensor([[r.advantage] for r in chosen], dtype=torch.float32, device=device),
        temperatures=None if all(t == 1.0 for t in temperatures) else torch.tensor(temperatures, device=device).view(-1, 1, 1),
        roles=[r.role for r in chosen],
        lengths=[r.length for r in chosen],
    )
