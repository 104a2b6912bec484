"""Per-token log-probs of given token sequences: the one definition shared by inference scoring and the learner.

    logprobs = token_logprobs(model, input_ids, attention_mask, temperature)   # [batch, seq]; position 0 is 0
    logprobs = sequence_logprobs(model, input_ids, attention_mask, temperatures)  # the same, memory bounded

Entry t is log softmax(logits[t-1] / T)[input_ids[t]], the log-prob of token t given tokens < t, in fp32.

`token_logprobs` materialises the whole [batch, seq, vocab] logits. `sequence_logprobs` (what the trainer uses)
runs the model up to its final hidden states (the output projection is skipped by a pre-hook), then computes
the vocabulary projection itself: in one piece while [tokens, vocab] stays under `max_logit_elements`, otherwise
in tiles of sequence x vocabulary chunks with a running log-sum-exp (`chunked_logprobs`), whose backward
recomputes each tile instead of keeping it. Peak memory of the head is then one tile, whatever the vocabulary
and the context length; the numbers are the same fp32 log-softmax up to summation order (tests/learner/
test_logprobs.py). Under bf16 autocast (the learner on a GPU) the projection runs in bf16, as the model's own
head would, and everything after it in fp32.
"""

from __future__ import annotations

import contextlib

import torch

# [tokens, vocab] logits up to this many elements are computed in one piece (64 MiB in fp32); beyond, in tiles.
MAX_LOGIT_ELEMENTS = 1 << 24
TILE_ROWS = 1024  # sequence positions per tile
TILE_COLUMNS = 8192  # vocabulary entries per tile


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    return logprobs_from_logits(logits, input_ids, temperature)


def logprobs_from_logits(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float) -> torch.Tensor:
    scale = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits[:, :-1].float() / scale, dim=-1)
    picked = logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.nn.functional.pad(picked, (1, 0))


def final_hidden_states(model, input_ids: torch.Tensor, attention_mask: torch.Tensor):
    """(hidden [batch, seq, dim], head weight [vocab, dim], head bias or None): the model's forward without its
    output projection. The head's input is taken by a forward pre-hook, which hands the head an empty slice, so
    no logits are computed; the weight is read inside the forward, where FSDP has it unsharded."""
    head = model.get_output_embeddings()
    if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
        raise ValueError(f"{type(model).__name__} has no linear output projection to chunk")
    taken: dict = {}

    def take(module, args):
        hidden = args[0]
        taken["hidden"], taken["weight"], taken["bias"] = hidden, module.weight, getattr(module, "bias", None)
        return (hidden[..., :0, :],)

    handle = head.register_forward_pre_hook(take)
    try:
        model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    finally:
        handle.remove()
    if taken.get("hidden") is None or taken["hidden"].shape[:2] != input_ids.shape:
        raise ValueError(f"{type(model).__name__}: its output projection did not see every position")
    return taken["hidden"], taken["weight"], taken["bias"]


def _needs_plain_path(model) -> bool:
    """Callables that are not a Hugging Face model (the trainer's adapter-disabled KL reference), and models whose
    logits are more than hidden @ W.T + b (soft-capping, a logit scale): their logits come from their forward."""
    if not hasattr(model, "get_output_embeddings"):
        return True
    config = getattr(model, "config", None)
    return bool(getattr(config, "final_logit_softcapping", None)) or getattr(config, "logit_scale", 1.0) not in (None, 1.0)


def sequence_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperatures: torch.Tensor | float | None = None,
    *,
    autocast: bool = False,
    positions: torch.Tensor | None = None,
    max_logit_elements: int = MAX_LOGIT_ELEMENTS,
    tile: tuple[int, int] = (TILE_ROWS, TILE_COLUMNS),
) -> torch.Tensor:
    """Like `token_logprobs`, with per-row temperatures ([batch] or [batch, 1, 1]; None or a float for all rows)
    and the head's memory bounded. `autocast`: run the model and the projection under bf16 autocast.
    `positions` (bool [batch, seq], optional): the entries wanted; the vocabulary projection then runs only at
    those (the learner passes its loss mask: prompt and padding positions, most of a sample, never reach the head)
    and every other entry is 0."""
    device = input_ids.device
    context = torch.autocast(device.type, dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    if _needs_plain_path(model):
        with context:
            logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits.float()
        if isinstance(temperatures, torch.Tensor):
            logits = logits / temperatures.reshape(-1, 1, 1)
            return logprobs_from_logits(logits, input_ids, 1.0)
        return logprobs_from_logits(logits, input_ids, float(temperatures or 1.0))
    with context:
        hidden, weight, bias = final_hidden_states(model, input_ids, attention_mask)
    rows, seq = input_ids.shape
    if isinstance(temperatures, torch.Tensor):
        scale = temperatures.reshape(rows, 1).float().expand(rows, seq - 1)
    else:
        value = float(temperatures) if temperatures else 1.0
        scale = torch.full((rows, seq - 1), value if value > 0 else 1.0, device=device)
    flat_hidden = hidden[:, :-1].reshape(-1, hidden.shape[-1])
    targets = input_ids[:, 1:].reshape(-1)
    scale = scale.reshape(-1)
    dtype = torch.bfloat16 if autocast else None
    if positions is None:
        picked = chunked_logprobs(flat_hidden, weight, bias, targets, scale, dtype=dtype, max_logit_elements=max_logit_elements, tile=tile)
    else:
        if positions.shape != input_ids.shape:
            raise ValueError(f"positions {tuple(positions.shape)} must have input_ids' shape {tuple(input_ids.shape)}")
        wanted = positions[:, 1:].reshape(-1).nonzero().squeeze(-1)
        some = chunked_logprobs(flat_hidden.index_select(0, wanted), weight, bias, targets[wanted], scale[wanted], dtype=dtype,
                                max_logit_elements=max_logit_elements, tile=tile)
        picked = some.new_zeros(targets.shape[0]).index_put((wanted,), some)
    return torch.nn.functional.pad(picked.view(rows, seq - 1), (1, 0))


def chunked_logprobs(hidden, weight, bias, targets, temperatures, *, dtype=None, max_logit_elements=MAX_LOGIT_ELEMENTS, tile=(TILE_ROWS, TILE_COLUMNS)):
    """log softmax((hidden @ weight.T + bias) / T)[target] per row, in fp32: hidden [n, dim], weight [vocab, dim],
    targets and temperatures [n]. `dtype`: the projection's compute dtype (None: fp32)."""
    n, vocab = hidden.shape[0], weight.shape[0]
    if n * vocab <= max_logit_elements:
        with torch.autocast(hidden.device.type, enabled=False):
            logits = _project(hidden, weight, bias, dtype) / temperatures[:, None]
            return torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
    return _TiledLogprobs.apply(hidden, weight, bias, targets, temperatures.float(), dtype, tile[0], tile[1])


def _project(hidden, weight, bias, dtype):
    if dtype is None:
        out = hidden.float() @ weight.float().T
        return out if bias is None else out + bias.float()
    out = (hidden.to(dtype) @ weight.to(dtype).T).float()
    return out if bias is None else out + bias.to(dtype).float()


class _TiledLogprobs(torch.autograd.Function):
    """The head in [rows x columns] tiles: forward keeps only the log-sum-exp per row; backward recomputes each
    tile (softmax from the saved log-sum-exp) and accumulates the hidden, weight and bias gradients in fp32."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperatures, dtype, rows, columns):
        n, vocab = hidden.shape[0], weight.shape[0]
        picked = torch.empty(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, n, rows):
                h, t, scale = hidden[start : start + rows], targets[start : start + rows], temperatures[start : start + rows, None]
                running_max = torch.full((h.shape[0],), float("-inf"), device=h.device)
                running_sum = torch.zeros(h.shape[0], device=h.device)
                target_logit = torch.zeros(h.shape[0], device=h.device)
                for first in range(0, vocab, columns):
                    b = None if bias is None else bias[first : first + columns]
                    z = _project(h, weight[first : first + columns], b, dtype) / scale
                    new_max = torch.maximum(running_max, z.max(dim=-1).values)
                    running_sum = running_sum * torch.exp(running_max - new_max) + torch.exp(z - new_max[:, None]).sum(dim=-1)
                    running_max = new_max
                    inside = (t >= first) & (t < first + z.shape[1])
                    local = (t - first).clamp(0, z.shape[1] - 1)
                    target_logit = torch.where(inside, z.gather(-1, local[:, None]).squeeze(-1), target_logit)
                lse[start : start + rows] = running_max + torch.log(running_sum)
                picked[start : start + rows] = target_logit - lse[start : start + rows]
        ctx.save_for_backward(hidden, weight, bias, targets, temperatures, lse)
        ctx.dtype, ctx.rows, ctx.columns = dtype, rows, columns
        return picked

    @staticmethod
    def backward(ctx, grad_picked):
        hidden, weight, bias, targets, temperatures, lse = ctx.saved_tensors
        dtype, rows, columns = ctx.dtype, ctx.rows, ctx.columns
        n, vocab = hidden.shape[0], weight.shape[0]
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device) if need_hidden else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_weight else None
        grad_bias = torch.zeros(vocab, dtype=torch.float32, device=weight.device) if need_bias and bias is not None else None
        mm = (lambda a, b: a.to(dtype) @ b.to(dtype)) if dtype is not None else (lambda a, b: a.float() @ b.float())
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, n, rows):
                h, t = hidden[start : start + rows], targets[start : start + rows]
                scale, g = temperatures[start : start + rows, None], grad_picked[start : start + rows, None].float()
                for first in range(0, vocab, columns):
                    w = weight[first : first + columns]
                    b = None if bias is None else bias[first : first + columns]
                    z = _project(h, w, b, dtype) / scale
                    # d picked / d z = onehot(target) - softmax(z); then d z / d logits = 1 / T
                    d = -torch.exp(z - lse[start : start + rows, None])
                    inside = (t >= first) & (t < first + z.shape[1])
                    local = (t - first).clamp(0, z.shape[1] - 1)
                    d.scatter_add_(1, local[:, None], inside[:, None].float())
                    d = d * g / scale
                    if grad_hidden is not None:
                        grad_hidden[start : start + rows] += mm(d, w).float()
                    if grad_weight is not None:
                        grad_weight[first : first + columns] += mm(d.T, h).float()
                    if grad_bias is not None:
                        grad_bias[first : first + columns] += d.sum(dim=0)
        return (
            None if grad_hidden is None else grad_hidden.to(hidden.dtype),
            None if grad_weight is None else grad_weight.to(weight.dtype),
            None if grad_bias is None else grad_bias.to(bias.dtype),
            None, None, None, None, None,
        )
