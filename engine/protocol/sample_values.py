"""A sample's values, checked: what the engine asks of every worker result (engine/peers/result_checks.py) and the
learner of every batch (learner/guards.py), since a sample comes from a peer.

    check_sample(sample)                                   # its arrays line up, else ValueError naming the mismatch
    sample_problem(sample, vocab_size=v, max_version=n)    # what is wrong with its values, or None
    values_pass(samples, vocab_size=v, max_version=n)      # all of them fine? one pass over their arrays joined
"""

from __future__ import annotations

import math

import numpy as np

from engine.protocol.messages import Sample, unpack_floats, unpack_ints, unpack_mask


def check_sample(sample: Sample) -> None:
    """A sample's arrays must line up: raises ValueError naming the mismatch."""
    for name in ("tokens", "logprobs", "versions"):  # 4-byte entries
        if len(getattr(sample, name)) % 4:
            raise ValueError(f"sample {sample.sample_id}: {name} holds {len(getattr(sample, name))} bytes, not a whole number of 4-byte entries")
    n = len(sample.tokens) // 4
    lengths = {
        "loss_mask": len(sample.loss_mask),
        "logprobs": len(sample.logprobs) // 4,
        "versions": len(sample.versions) // 4,
    }
    for name, length in lengths.items():
        if length != n:
            raise ValueError(f"sample {sample.sample_id}: {name} has {length} entries for {n} tokens")


# A behaviour log-prob above 0 by more than float32 rounding is not a log-probability.
LOGPROB_TOLERANCE = 1e-4


def sample_problem(sample: Sample, *, vocab_size: int | None = None, max_version: int | None = None) -> str | None:
    """What is wrong with a sample's values, or None: its arrays line up (`check_sample`); token ids lie in
    [0, vocab_size); the loss mask is 0 or 1; log-probs are finite, and <= 0 (within LOGPROB_TOLERANCE) on masked
    tokens; versions lie in [-1, max_version]; reward, advantage and temperature are finite. The engine asks it of
    every result a worker sends (engine/peers/result_checks.py), the learner of every batch (learner/guards.py)."""
    try:
        check_sample(sample)
    except ValueError as exc:
        return str(exc)[:200]
    for name in ("reward", "advantage", "temperature"):
        if not math.isfinite(getattr(sample, name)):
            return f"sample {name} is {getattr(sample, name)}, not a finite number"
    ids, mask = unpack_ints(sample.tokens), unpack_mask(sample.loss_mask)
    if not len(ids):
        return None
    # Every result a worker sends passes here: whole-array reductions, no index arrays.
    # Read as unsigned, a negative id is >= 2**31, so one max bounds both ends.
    outside = int(ids.min()) < 0 if vocab_size is None else int(ids.view("<u4").max()) >= min(vocab_size, 1 << 31)
    if outside:
        low, high = int(ids.min()), int(ids.max())
        return f"token id {low if low < 0 else high} is outside the model's vocabulary [0, {vocab_size})"
    if int(mask.max()) > 1:
        return f"loss mask holds {int(mask.max())}, not only 0 and 1"
    logprobs = unpack_floats(sample.logprobs)
    if not np.isfinite(logprobs).all():
        return "a behaviour log-prob is not finite"
    # The largest log-prob on a sampled token (mask 1); masked out, a value reads 0, which never exceeds the tolerance.
    if (top := float((logprobs * mask).max())) > LOGPROB_TOLERANCE:
        return f"a behaviour log-prob on a sampled token is {top:.4g} > 0"
    versions = unpack_ints(sample.versions)
    if int(versions.min()) < -1 or (max_version is not None and int(versions.max()) > max_version):
        return f"policy versions span [{int(versions.min())}, {int(versions.max())}], outside [-1, {max_version}]"
    return None


_U4, _I4, _F4, _U1 = np.dtype("<u4"), np.dtype("<i4"), np.dtype("<f4"), np.dtype(np.uint8)


def values_pass(samples: list[Sample], *, vocab_size: int | None = None, max_version: int | None = None, versioned: bool = False) -> bool:
    """Whether every sample passes `sample_problem` (and, `versioned`, stamps each loss-mask token with a policy
    version >= 0): one pass over all their arrays joined, as every check holds token by token. The engine asks it
    of the results a receive brings in together, so the checks cost a few array passes a batch rather than a
    sample. False says only that something fails somewhere: `sample_problem` of each says what."""
    for s in samples:
        n = len(s.tokens)
        if n % 4 or len(s.logprobs) != n or len(s.versions) != n or len(s.loss_mask) * 4 != n:
            return False
        if not (math.isfinite(s.reward) and math.isfinite(s.advantage) and math.isfinite(s.temperature)):
            return False
    def joined(name: str) -> bytes:  # one sample's array comes back as it is (bytes.join of one item is that item)
        return b"".join(getattr(s, name) for s in samples)

    tokens = joined("tokens")
    if not tokens:
        return True
    # Read as unsigned, a negative id (or version + 1) is >= 2**31, so one max bounds both ends.
    if int(np.maximum.reduce(np.frombuffer(tokens, _U4))) >= (1 << 31 if vocab_size is None else min(vocab_size, 1 << 31)):
        return False
    mask = np.frombuffer(joined("loss_mask"), _U1)
    if int(np.maximum.reduce(mask)) > 1:
        return False
    logprobs = np.frombuffer(joined("logprobs"), _F4)
    if not np.logical_and.reduce(np.isfinite(logprobs)) or float(np.maximum.reduce(logprobs * mask)) > LOGPROB_TOLERANCE:
        return False  # masked out, a log-prob reads 0
    versions = np.frombuffer(joined("versions"), _I4)
    if int(np.maximum.reduce((versions + 1).view(_U4))) > (max_version + 1 if max_version is not None else (1 << 31) - 1):
        return False
    return not versioned or int(np.minimum.reduce(versions * mask)) >= 0  # masked out, a version reads 0
