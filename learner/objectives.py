"""Policy-gradient objectives on per-token log-probs.

`clipped_tis_loss` is the reference's objective: the PPO-clipped ratio r = pi_theta / pi_old with clip range
[1 - eps_low, 1 + eps_high], multiplied by the truncated importance weight w = min(pi_old / mu, cap) that
corrects for the gap between the behaviour policy mu (the inference backend that sampled the tokens) and the
learner's pi_old. It returns per-token losses; the caller aggregates (token mean within each role).

With one optimizer step per batch, pi_old is the current policy itself (`logprobs.detach()`), so r = 1 with the
gradient of pi_theta, and the clip only matters once several updates reuse a batch.
"""

from __future__ import annotations

import torch


def clipped_tis_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    is_cap: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    ratio = torch.exp(logprobs - old_logprobs)
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    surrogate = torch.minimum(ratio * advantages, clipped * advantages)
    weight = torch.clamp(torch.exp(old_logprobs - behaviour_logprobs), max=is_cap).detach()
    loss = -weight * surrogate
    stats = {
        "clip_fraction": ((ratio - clipped).abs() > 1e-9).float(),
        "is_weight": weight,
        "is_truncated": (torch.exp(old_logprobs - behaviour_logprobs) > is_cap).float(),
    }
    return loss, stats
