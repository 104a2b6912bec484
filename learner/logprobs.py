"""Per-token log-probs of given token sequences: the one definition shared by inference scoring and the learner.

    logprobs = token_logprobs(model, input_ids, attention_mask, temperature)   # [batch, seq]; position 0 is 0

Entry t is log softmax(logits[t-1] / T)[input_ids[t]], the log-prob of token t given tokens < t.
"""

from __future__ import annotations

import torch


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    return logprobs_from_logits(logits, input_ids, temperature)


def logprobs_from_logits(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float) -> torch.Tensor:
    scale = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits[:, :-1].float() / scale, dim=-1)
    picked = logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.nn.functional.pad(picked, (1, 0))
