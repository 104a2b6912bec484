"""What a GPU node shows and what the run's models take on it: the GPUs (nvidia-smi, or faked), a model's shapes
from its config.json, and the learner's memory per GPU (a simple estimate, or `up`'s measured plan). No torch
here; engine/protocol/placement.py plans with these.

    count, gib = visible_gpus()                    # (GPUs this process may use, GiB each); SPADE_FAKE_GPUS="8x80"
    shape = model_shape(model_path)                # parameters, layers, KV bytes a token; None when it cannot say
    mem = learner_memory(shape, config, ranks=8)   # LearnerMemory: resident and peak GiB per learner GPU (estimate)
    mem = measured_learner_memory(record)          # the same from learner/memory_plan.py's JSON line
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import msgspec

from engine.protocol.config_loading import ConfigError

GIB = 1 << 30
FAKE_GPUS_ENV = "SPADE_FAKE_GPUS"  # "N" or "NxGIB": plan as if the node showed N GPUs (tests, dry runs on a CPU machine)
DEFAULT_GPU_MEMORY_GIB = 80.0  # when nvidia-smi does not say (fake GPUs without a size)
SERVING_BYTES = 2  # vLLM serves bf16 on a GPU (actors/inference/vllm.py)


class PlacementError(ConfigError):
    """A placement that cannot work on this node: the message names the field and the fix."""


class ModelShape(msgspec.Struct, frozen=True, kw_only=True):
    """What the memory estimates need from a model's config.json."""

    parameters: int
    layers: int
    hidden: int
    kv_heads: int
    head_dim: int
    vocab: int

    @property
    def kv_bytes_per_token(self) -> int:
        """Keys and values of one token over every layer, bf16."""
        return 2 * self.layers * self.kv_heads * self.head_dim * SERVING_BYTES

class LearnerMemory(msgspec.Struct, frozen=True, kw_only=True):
    resident_gib: float  # on each learner GPU between updates (what a time-shared engine must leave room for)
    peak_gib: float  # on each learner GPU during an update
    detail: str

# ---------------------------------------------------------------- what the node shows
def visible_gpus(env=None, smi=None) -> tuple[int, float]:
    """(GPUs this process may use, GiB each): `SPADE_FAKE_GPUS` when set ("N" or "NxGIB"; tests and dry runs),
    else nvidia-smi's list, narrowed to CUDA_VISIBLE_DEVICES when that is set. No nvidia-smi: (0, 0), the CPU.
    `smi` (tests): a function returning nvidia-smi's `--query-gpu=memory.total` lines, one per GPU, or None."""
    env = os.environ if env is None else env
    fake = env.get(FAKE_GPUS_ENV, "").strip()
    if fake:
        count, _, size = fake.lower().partition("x")
        try:
            return int(count), float(size) if size else DEFAULT_GPU_MEMORY_GIB
        except ValueError:
            raise PlacementError(f"{FAKE_GPUS_ENV}={fake!r}: expected N or NxGIB, e.g. 8x80") from None
    lines = (smi or _nvidia_smi)()
    if not lines:
        return 0, 0.0
    sizes = [float(line.strip()) / 1024 for line in lines if line.strip()]  # MiB
    shown = env.get("CUDA_VISIBLE_DEVICES")
    if shown is not None:
        entries = [d for d in shown.split(",") if d.strip()]
        if not entries or entries[0].strip() == "-1":
            return 0, 0.0
        if all(e.strip().isdigit() for e in entries):  # device numbers; else UUIDs, counted only
            sizes = [sizes[int(e)] for e in entries if int(e) < len(sizes)]
        else:
            sizes = sizes[: len(entries)]
    return len(sizes), min(sizes) if sizes else 0.0


def _nvidia_smi() -> list[str] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=memory.total", "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.splitlines() if out.returncode == 0 else None


def model_shape(model_path: str | Path | None) -> ModelShape | None:
    """The shapes in `model_path`/config.json (a multimodal config's `text_config` too); None when it cannot say."""
    if not model_path:
        return None
    try:
        data = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    data = data.get("text_config") or data
    try:
        hidden, layers, vocab = int(data["hidden_size"]), int(data["num_hidden_layers"]), int(data["vocab_size"])
        heads = int(data["num_attention_heads"])
        kv_heads = int(data.get("num_key_value_heads") or heads)
        head_dim = int(data.get("head_dim") or hidden // heads)
        inter = int(data.get("intermediate_size") or 4 * hidden)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    experts = int(data.get("num_experts") or data.get("num_local_experts") or 0)
    mlp = 3 * hidden * inter
    if experts:  # mixture of experts: every expert's MLP, and the router
        mlp = experts * 3 * hidden * int(data.get("moe_intermediate_size") or inter) + hidden * experts
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    embeddings = vocab * hidden * (1 if data.get("tie_word_embeddings", False) else 2)
    parameters = layers * (attention + mlp + 2 * hidden) + embeddings + hidden
    return ModelShape(parameters=parameters, layers=layers, hidden=hidden, kv_heads=kv_heads, head_dim=head_dim, vocab=vocab)


# ---------------------------------------------------------------- memory estimates
def learner_memory(shape: ModelShape, config, ranks: int) -> LearnerMemory:
    """The learner's memory on each of its `ranks` GPUs: a simple estimate. The hook the learner's own memory plan
    (measured activations, checkpointing, the mixed-precision policy) replaces: keep the signature.

    Full fine-tuning: parameters, gradients and AdamW's two moments in `model.dtype`, sharded over the ranks by
    FSDP2 (4 fp32 copies; 3 stay between updates, gradients are freed), a KL reference copy when
    `learner.objective.kl_coef` > 0, none of it on the GPU with `learner.cpu_offload = "on"`; LoRA: the frozen model
    and a small adapter, one rank. During an update also the
    activations of one micro-batch (`learner.micro_batch_tokens`), which FSDP does not shard: 34 x hidden bytes a
    token a layer in bf16 without recomputation (Korthikanti et al. 2022, flash attention), and fp32 logits over the
    vocabulary at each token. `up` replaces this estimate by the learner's measured plan (learner/memory_plan.py,
    `measured_learner_memory`) wherever the learner runs on GPUs."""
    # Full fine-tuning keeps fp32 master weights and AdamW state whatever model.dtype (learner/precision.py); a LoRA
    # run's frozen base is held in model.dtype.
    params = shape.parameters * 4
    offloaded = config.learner.cpu_offload == "on" and config.learner.lora_rank == 0  # the state in host RAM
    if config.learner.lora_rank > 0:
        params = shape.parameters * (2 if config.model.dtype == "bfloat16" else 4)
        resident = params
        state = "frozen weights (LoRA)"
    elif offloaded:
        resident = 0
        state = "fp32 weights + AdamW state in host RAM (learner.cpu_offload)"
    else:
        resident = 3 * params / ranks
        state = f"fp32 weights + AdamW state (/{ranks})"
    if config.learner.objective.kl_coef > 0 and not offloaded:
        resident += params / (ranks if config.learner.lora_rank == 0 else 1)
        state += " + KL reference"
    grads = 0 if config.learner.lora_rank > 0 or offloaded else params / ranks
    tokens = config.learner.micro_batch_tokens
    checkpointed = bool(getattr(config.learner, "activation_checkpointing", False))
    per_token = (2 if checkpointed else 34) * shape.hidden * shape.layers + 4 * shape.vocab
    activations = tokens * per_token + (34 * shape.hidden * tokens if checkpointed else 0)
    peak = resident + grads + activations
    detail = (f"{state} {resident / GIB:.1f} + gradients {grads / GIB:.1f} + activations {activations / GIB:.1f} for "
              f"{tokens} tokens{' (checkpointed)' if checkpointed else ''}")
    return LearnerMemory(resident_gib=resident / GIB, peak_gib=peak / GIB, detail=detail)


def measured_learner_memory(record: dict) -> LearnerMemory:
    """The learner's measured plan (learner/memory_plan.py's JSON line: bytes per rank) as the placement's figure."""
    parts = record.get("parts") or {}
    detail = " + ".join(f"{name} {value / GIB:.1f}" for name, value in parts.items()) or "measured"
    return LearnerMemory(resident_gib=record["resident_bytes"] / GIB, peak_gib=record["peak_bytes"] / GIB,
                         detail=f"{detail}; learner/memory_plan.py")
