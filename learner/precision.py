"""The learner's dtypes: fp32 master weights always; `model.dtype` is what it computes in and what it publishes.

    compute = compute_dtype(config.model.dtype, device)   # torch.bfloat16 (autocast, CPU or CUDA) or None (plain fp32)
    require_fp32_masters(model)                           # InputError if a trained parameter is not fp32
    state = cast_state_dict(state, torch.bfloat16)        # the weights as a worker loads them, on the CPU

`model.dtype` is the generator's dtype. For the learner it means:
- master weights: every trained parameter, and so AdamW's state, is fp32 whatever `model.dtype` says. At the
  paper's learning rate (1e-6) an AdamW step moves a weight by about 1e-6, far below bf16's resolution (2^-8
  relative: ~1e-4 for a weight of 0.02), so an optimizer stepping bf16 weights would round most updates away.
- compute: bfloat16 runs the forward and backward under bf16 autocast (on the CPU too), and under
  `learner.world_size > 1` FSDP2 also gathers the weights in bf16 and sums gradients in fp32
  (learner/distributed.py `shard_model`); float32 computes in fp32, on a GPU too.
- publishing: each policy version is written in `model.dtype` (bf16: half the bytes of fp32, and what the workers
  load); checkpoints keep the fp32 masters, so a resume is exact. A LoRA adapter is published as trained (fp32, it is
  small); the workers merge it into their base in their own dtype. learner/cast_check.py compares the log-probs
  of what was published with the learner's before a version goes out.
- frozen weights (the KL reference, LoRA's base model) are held in `model.dtype`: they never take an update.
"""

from __future__ import annotations

import torch

from engine.protocol.errors import InputError


def torch_dtype(name: str) -> torch.dtype:
    """`model.dtype`'s name ("float32", "bfloat16") as a torch dtype."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise InputError(f"model.dtype is {name!r}: set model.dtype = 'float32' or 'bfloat16'")
    return dtype


def compute_dtype(name: str, device: torch.device) -> torch.dtype | None:
    """The learner's compute dtype for `model.dtype = name`: torch.bfloat16 (autocast), or None for plain fp32."""
    dtype = torch_dtype(name)
    if dtype == torch.float32:
        return None
    if dtype != torch.bfloat16:
        raise InputError(f"model.dtype is {name!r}: the learner computes in 'float32' or 'bfloat16'; set one of them")
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise InputError("model.dtype is 'bfloat16' but this GPU has no bf16 support: set model.dtype = 'float32'")
    return dtype


def require_fp32_masters(model) -> None:
    """Refuse a model whose trained parameters are not fp32: AdamW would step them in a lossy dtype."""
    lossy = [(name, p.dtype) for name, p in model.named_parameters() if p.requires_grad and p.dtype != torch.float32]
    if lossy:
        name, dtype = lossy[0]
        raise InputError(
            f"the learner's trained parameter {name} is {str(dtype).removeprefix('torch.')}, not fp32 ({len(lossy)} such): "
            "the learner keeps fp32 master weights whatever model.dtype says; load the model with dtype=torch.float32"
        )


def cast_state_dict(state: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """`state` with every floating tensor cast to `dtype`, on the CPU. Tensors that share memory (tied embeddings)
    stay one tensor, so the folder written from it ties them as the fp32 one did."""
    cast: dict[str, torch.Tensor] = {}
    seen: dict[tuple, torch.Tensor] = {}
    for key, tensor in state.items():
        if not tensor.is_floating_point():
            cast[key] = tensor
            continue
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        identity = (local.device, local.untyped_storage().data_ptr(), local.storage_offset(), tuple(local.shape), local.stride())
        if identity not in seen:
            seen[identity] = local.detach().to(device="cpu", dtype=dtype)
        cast[key] = seen[identity]
    return cast

