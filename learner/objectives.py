"""Policy-gradient objectives for asynchronous GRPO on per-token log-probs, selectable by name.

    cfg = ObjectiveConfig()                                    # decoupled PPO, clip 0.2 / 0.28, w > 5 masked
    losses, kept, stats = token_losses(cfg, logprobs, proximal, behaviour, advantages, mask)
    loss = aggregate(losses, kept, roles=["agent", "designer"], role_weights={"agent": 1.0, "designer": 1.0}, mode="sample_mean")

Notation (every tensor is [batch, seq], one row per sequence; advantages may be [batch, 1]):
  logprobs  log pi_theta, the policy being optimised (carries the gradient)
  proximal  log pi_prox, the learner's recomputation with the weights before this update (no gradient)
  behaviour log mu, recorded by the inference engine that sampled the tokens (no gradient)

Every objective uses the clipped surrogate on r = pi_theta / pi_prox, clip(r) = clamp(r, 1 - clip_low,
1 + clip_high), and differs only in the behaviour weight w built from k = pi_prox / mu:
  decoupled_ppo  w = k, tokens with k > behaviour_cap leave the loss mask (AReaL's decoupled PPO)
  tis            w = min(k, tis_cap)                  (truncated importance sampling, the SPADE reference)
  icepop         w = k inside [icepop_low, icepop_high], tokens outside leave the loss mask
The per-token loss is -w * min(r * A, clip(r) * A) (+ kl_coef * k3 to a frozen reference, clamped to [-10, 10]
as slime and verl clamp it: `k3_clamped`), zero outside the
effective mask M; `aggregate` turns it into a per-sample mean (the reference: each sequence's token mean, then
the mean over sequences) or a token mean per role. With `seq_filter`, a whole sequence
leaves M when the geometric mean of k over its tokens, exp(mean log k), falls outside [seq_low, seq_high].

The settings are `ObjectiveConfig`, the `[learner.objective]` table of engine/protocol/config.py (re-exported here);
their ranges are checked with the rest of the config (`engine.protocol.config_loading.check_config`), not on construction.

On-policy (mu = pi_prox = pi_theta.detach()) every objective equals `plain_grpo_loss` in value and gradient.
M depends only on proximal, behaviour and the caller's mask, so `effective_mask` gives the per-role token counts
before any gradient pass (for micro-batched gradient accumulation, pass them to `aggregate` as `role_tokens`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from engine.protocol.config import OBJECTIVES, ObjectiveConfig  # declared once, as `[learner.objective]`; checked there

__all__ = ["OBJECTIVES", "ObjectiveConfig", "aggregate", "effective_mask", "k3", "k3_clamped", "plain_grpo_loss", "token_losses"]

# slime's and verl's low_var_kl bounds: the log ratio before the exp (no overflow), the k3 term after it.
KL_LOG_RATIO_BOUND = 20.0
KL_BOUND = 10.0


def k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator term, ratio - log(ratio) - 1 >= 0, from log(ratio)."""
    return torch.expm1(log_ratio) - log_ratio


def k3_clamped(log_ratio: torch.Tensor) -> torch.Tensor:
    """The KL term of the loss as slime and verl compute it (`low_var_kl`): k3 of the log ratio clamped to
    [-20, 20], then clamped to [-10, 10]. k3 grows as exp(log ratio), so one token far from the reference would
    otherwise dominate a batch's loss (log ratio 3: 16.1 unclamped, 10 here); past the bound the term has no
    gradient, as in both."""
    return k3(log_ratio.clamp(-KL_LOG_RATIO_BOUND, KL_LOG_RATIO_BOUND)).clamp(-KL_BOUND, KL_BOUND)


def effective_mask(cfg: ObjectiveConfig, proximal: torch.Tensor, behaviour: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The tokens that stay in the loss (bool): the caller's mask less those the objective or the filter drops."""
    log_k = (proximal - behaviour).detach()
    kept = mask.bool()
    if cfg.name == "decoupled_ppo":
        kept = kept & (log_k.exp() <= cfg.behaviour_cap)
    elif cfg.name == "icepop":
        k = log_k.exp()
        kept = kept & (k >= cfg.icepop_low) & (k <= cfg.icepop_high)
    if cfg.seq_filter:
        tokens = mask.bool()
        mean_log_k = torch.where(tokens, log_k, 0.0).sum(-1) / tokens.sum(-1).clamp(min=1)
        geometric = mean_log_k.exp()
        in_band = (geometric >= cfg.seq_low) & (geometric <= cfg.seq_high)
        kept = kept & in_band.unsqueeze(-1)
    return kept


def token_losses(
    cfg: ObjectiveConfig,
    logprobs: torch.Tensor,
    proximal: torch.Tensor,
    behaviour: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ref_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token losses (zero outside M), the effective mask M (bool) and detached 0-d stats.

    Stats: clip_fraction (tokens of M where the clipped term is the minimum, so the gradient is cut),
    behaviour_weight_mean / behaviour_weight_max (k = pi_prox / mu before any cap, over the caller's mask),
    masked_fraction (caller's tokens dropped by w > cap, icepop's band or the sequence filter),
    mismatch_k3 (mean over the caller's mask of k - log k - 1 with k = pi_prox / mu: the k3 estimate of
    KL(mu || pi_prox) from the tokens mu sampled, unclamped), kl_ref (mean clamped k3 to the reference over M, the
    term the loss carries; 0 without one),
    tokens and kept_tokens (|mask| and |M|, to weight means across micro-batches).
    """
    if not (logprobs.shape == proximal.shape == behaviour.shape == mask.shape):
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)}, proximal {tuple(proximal.shape)}, behaviour {tuple(behaviour.shape)} "
            f"and mask {tuple(mask.shape)} must all have the same [batch, seq] shape"
        )
    if cfg.kl_coef > 0.0 and ref_logprobs is None:
        raise ValueError(f"kl_coef is {cfg.kl_coef} but no ref_logprobs were given: pass the reference model's log-probs or set kl_coef = 0")
    proximal, behaviour, advantages = proximal.detach(), behaviour.detach(), advantages.detach()
    log_k = proximal - behaviour
    k = log_k.exp()
    kept = effective_mask(cfg, proximal, behaviour, mask)
    if cfg.name == "tis":
        weight = k.clamp(max=cfg.tis_cap)
    else:
        weight = torch.where(kept, k, 0.0)

    ratio = torch.exp(logprobs - proximal)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high) * advantages
    loss = -weight * torch.minimum(unclipped, clipped)
    kl = None
    if ref_logprobs is not None:
        kl = k3_clamped(ref_logprobs.detach() - logprobs)  # ratio = pi_ref / pi_theta
        if cfg.kl_coef > 0.0:
            loss = loss + cfg.kl_coef * kl
    loss = torch.where(kept, loss, 0.0)

    with torch.no_grad():
        tokens = mask.bool()
        n_tokens = tokens.sum()
        n_kept = kept.sum()
        per_token = n_tokens.clamp(min=1)
        per_kept = n_kept.clamp(min=1)
        stats = {
            "clip_fraction": (kept & (clipped < unclipped)).sum() / per_kept,
            "behaviour_weight_mean": torch.where(tokens, k, 0.0).sum() / per_token,
            "behaviour_weight_max": torch.where(tokens, k, 0.0).max() if tokens.any() else k.new_zeros(()),
            "masked_fraction": (n_tokens - n_kept) / per_token,
            "mismatch_k3": torch.where(tokens, k3(log_k), 0.0).sum() / per_token,
            "kl_ref": torch.where(kept, kl, 0.0).sum() / per_kept if kl is not None else k.new_zeros(()),
            "tokens": n_tokens.to(k.dtype),
            "kept_tokens": n_kept.to(k.dtype),
        }
    return loss, kept, stats


def aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    roles: Sequence[str],
    role_weights: Mapping[str, float],
    *,
    role_tokens: Mapping[str, float] | None = None,
    mode: str = "role_token_mean",
    row_tokens: torch.Tensor | None = None,
    samples: float | None = None,
) -> torch.Tensor:
    """The batch loss from per-token losses (summed over `mask`); roles[i] names row i.

    role_token_mean: sum over roles of weight * (token mean of the role's losses). `role_tokens` replaces each
    role's denominator (its token count in the whole batch when the batch is split into micro-batches whose losses
    are summed); a role without tokens contributes 0.
    sample_mean (the reference's per-sample mean): (1/N) sum over rows of weight(role) * (row's loss sum / its
    token count), both roles together. `row_tokens` [rows] gives each row's denominator (default: its tokens in
    `mask`; pass the caller's mask counts when `mask` is the effective mask), `samples` N (default: the rows; the
    whole batch's count when it is split into micro-batches).
    """
    if len(roles) != per_token_loss.shape[0]:
        raise ValueError(f"roles names {len(roles)} rows but the loss has {per_token_loss.shape[0]}")
    unknown = sorted(set(roles) - set(role_weights))
    if unknown:
        raise ValueError(f"roles {unknown} have no weight in role_weights (known: {', '.join(role_weights)})")
    weights = mask.to(per_token_loss.dtype)
    if mode == "sample_mean":
        counts = weights.sum(-1) if row_tokens is None else row_tokens.to(per_token_loss.dtype)
        per_row = (per_token_loss * weights).sum(-1) / counts.clamp(min=1)
        row_weights = torch.tensor([float(role_weights[r]) for r in roles], dtype=per_token_loss.dtype, device=per_token_loss.device)
        n = float(samples) if samples is not None else float(len(roles))
        return (row_weights * per_row).sum() / max(n, 1.0)
    if mode != "role_token_mean":
        raise ValueError(f"unknown aggregation {mode!r} (known: sample_mean, role_token_mean)")
    total = per_token_loss.new_zeros(())
    for role, role_weight in role_weights.items():
        rows = torch.tensor([r == role for r in roles], device=per_token_loss.device)
        count = float(role_tokens[role]) if role_tokens is not None else float(weights[rows].sum())
        if count > 0:
            total = total + role_weight * (per_token_loss[rows] * weights[rows]).sum() / count
    return total


def plain_grpo_loss(logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The on-policy reference: -(1/|M|) sum_M A_t * exp(logp - logp.detach()), whose gradient is -A grad logp."""
    weights = mask.to(logprobs.dtype)
    surrogate = advantages.detach() * torch.exp(logprobs - logprobs.detach())
    return -(surrogate * weights).sum() / weights.sum().clamp(min=1)
