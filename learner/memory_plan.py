"""The learner's GPU memory per rank, planned from the model's config.json before anything is loaded.

    python -m learner.memory_plan --model DIR_OR_CONFIG --world-size 8 --gpu-gb 80 --micro-batch-tokens 32768 --checkpointing
    figure = measure_activations(config)                     # learner/activation_memory.py: bytes a token, measured
    plan = plan_memory(shape, figure, world_size=8, micro_batch_tokens=32768, checkpointing=True, gpu_gib=80)
    plan.peak_bytes, plan.resident_bytes, plan.fits           # bytes per rank
    refusal(plan, shape, figure)                              # one line naming the fix
    choose_offload(shape, figure, world_size=1, ...)          # learner.cpu_offload = "auto"

What a rank holds (full fine-tuning on GPUs: fp32 master weights, computing in `model.dtype`, bf16 on a GPU
node; learner/precision.py, learner/distributed.py):
- state, sharded over `world_size` by FSDP2: fp32 parameters (4 bytes a parameter), fp32 gradients (4, freed
  between updates), AdamW's two fp32 moments (8); the KL reference (`learner.objective.kl_coef` > 0) in
  `model.dtype` (2 in bf16);
- FSDP2's working buffers (world_size > 1 or cpu_offload; est.): the root's parameters (embeddings, final norm) unsharded in bf16
  with their bf16 and fp32 gradients, two decoder layers unsharded (the one running and the one prefetched) and one
  layer's gradients; one process without FSDP instead keeps autocast's bf16 copy of every weight until the forward
  ends (2 bytes a parameter);
- activations of one micro-batch of `learner.micro_batch_tokens`, which FSDP does not shard, MEASURED on a
  full-width two-layer slice of the model under FakeTensorMode (learner/activation_memory.py). Without
  checkpointing every layer keeps its tensors; with `learner.activation_checkpointing` a layer keeps only its input
  and one layer at a time is recomputed during backward. Plus the part outside the layers (embeddings, final norm,
  the log-prob head's saved tensors) and the head's backward (its fp32 weight gradient and tiles; est.).
With `learner.cpu_offload` (FSDP2's CPU offload, one process too) the sharded state moves to host RAM: the GPU
keeps FSDP2's working buffers and the activations, and the node's RAM must hold every rank's state
(`HOST_USABLE_SHARE` of it). `--cpu-offload auto` plans without it and offloads only when that alone makes the
plan fit (`choose_offload`; `up` writes the answer into the run's config).
A plan fits when its peak is at most `USABLE_SHARE` of the GPU (the rest for the CUDA context and the allocator's
fragmentation). LoRA (`learner.lora_rank` > 0): the frozen model in `model.dtype` on one process, the adapter's
state left out.

`up` checks the plan before it starts any process when the learner will run on GPUs (engine/tools/learner_memory.py
runs this module as a child process, since the engine does not import torch); on a machine without GPUs, or with
`learner.device = "cpu"`, there is nothing to check and the check is skipped (so a CPU run starts as before).
The placement plan (engine/protocol/placement.py) can take `peak_bytes` / `resident_bytes` from the JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from learner.activation_memory import ActivationFigure, decoder_layers, measure_activations

GIB = 1 << 30
USABLE_SHARE = 0.9  # of a GPU's memory a plan may fill (CUDA context, caching-allocator fragmentation: est.)
HOST_USABLE_SHARE = 0.8  # of the node's RAM the offloaded state may fill (the rest: rank 0's loaded copy, the engine)
FIXED_BYTES = 1 << 30  # CUDA context, NCCL buffers, the micro-batch's ids and masks (est.)


@dataclass(frozen=True)
class ModelShape:
    """Parameter counts from the model's config (the model built on the meta device: no weights are read)."""

    parameters: int  # every parameter once (tied embeddings once)
    layers: int
    layer_parameters: int  # the largest decoder layer's
    root_parameters: int  # outside the decoder layers: embeddings, final norm, an untied head
    hidden: int
    vocab: int


@dataclass(frozen=True)
class MemoryPlan:
    world_size: int
    micro_batch_tokens: int
    checkpointing: bool
    kl_reference: bool
    lora: bool
    gpu_bytes: int
    parts: dict  # name -> bytes per rank at the update's peak
    resident_bytes: int  # between updates: weights, optimizer state, the KL reference
    peak_bytes: int
    settings: dict  # plan_memory's keyword arguments, to plan the same with a change (`refusal`)
    cpu_offload: bool = False
    host_bytes: int = 0  # per rank, in host RAM: the offloaded state (cpu_offload)
    host_total_bytes: int = 0  # the node's RAM (0: not known, not checked)

    @property
    def usable_bytes(self) -> int:
        return int(self.gpu_bytes * USABLE_SHARE)

    @property
    def host_fits(self) -> bool:
        return not self.host_total_bytes or self.host_bytes * self.world_size <= self.host_total_bytes * HOST_USABLE_SHARE

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.usable_bytes and self.host_fits

    def summary(self) -> str:
        lines = [f"learner memory plan: {self.world_size} rank(s), micro-batch {self.micro_batch_tokens} tokens, "
                 f"activation checkpointing {'on' if self.checkpointing else 'off'}"
                 f"{', KL reference' if self.kl_reference else ''}{', LoRA' if self.lora else ''}"
                 f"{', fp32 state offloaded to host RAM' if self.cpu_offload else ''}"]
        lines += [f"  {name:<28} {value / GIB:8.2f} GiB" for name, value in self.parts.items()]
        lines.append(f"  {'peak per rank':<28} {self.peak_bytes / GIB:8.2f} GiB of {self.usable_bytes / GIB:.2f} usable "
                     f"({USABLE_SHARE:.0%} of {self.gpu_bytes / GIB:.0f}): {'fits' if self.peak_bytes <= self.usable_bytes else 'does NOT fit'}")
        if self.cpu_offload:
            node = f" of {self.host_total_bytes * HOST_USABLE_SHARE / GIB:.0f} usable ({HOST_USABLE_SHARE:.0%} of the node's RAM)" if self.host_total_bytes else ""
            lines.append(f"  {'host RAM, every rank':<28} {self.host_bytes * self.world_size / GIB:8.2f} GiB{node}: "
                         f"{'fits' if self.host_fits else 'does NOT fit'}")
        return "\n".join(lines)

    def record(self) -> dict:
        return {
            "world_size": self.world_size, "micro_batch_tokens": self.micro_batch_tokens,
            "checkpointing": self.checkpointing, "kl_reference": self.kl_reference, "lora": self.lora,
            "gpu_bytes": self.gpu_bytes, "usable_bytes": self.usable_bytes, "resident_bytes": self.resident_bytes,
            "peak_bytes": self.peak_bytes, "fits": self.fits, "parts": {k: int(v) for k, v in self.parts.items()},
            "cpu_offload": self.cpu_offload, "host_bytes": self.host_bytes, "host_total_bytes": self.host_total_bytes,
        }


# ---------------------------------------------------------------- the model's config and shape
def load_model_config(source: str | Path):
    """A transformers config from a model folder, a config.json file or a (cached) hub id."""
    from transformers import AutoConfig

    path = Path(source).expanduser()
    if path.is_dir() or not path.exists():  # a folder, or a hub id already in the Hugging Face cache
        return AutoConfig.from_pretrained(path if path.is_dir() else str(source))
    data = json.loads(path.read_text())
    return AutoConfig.for_model(data.pop("model_type"), **data)




def model_shape(config) -> ModelShape:
    """Count the parameters of the model the config describes, built on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    parameters = sum(p.numel() for p in model.parameters())
    layers = decoder_layers(model)
    layer_parameters = max(sum(p.numel() for p in layer.parameters()) for layer in layers)
    root = parameters - sum(sum(p.numel() for p in layer.parameters()) for layer in layers)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return ModelShape(parameters=parameters, layers=len(layers), layer_parameters=layer_parameters, root_parameters=root,
                      hidden=int(text.hidden_size), vocab=int(text.vocab_size))




# ---------------------------------------------------------------- the plan (arithmetic only)
def plan_memory(
    shape: ModelShape,
    figure: ActivationFigure,
    *,
    world_size: int,
    micro_batch_tokens: int,
    checkpointing: bool,
    gpu_gib: float,
    kl_reference: bool = False,
    lora: bool = False,
    compute_bytes: int = 2,
    cpu_offload: bool = False,
    host_gib: float = 0.0,
    tile: tuple[int, int] = (1024, 8192),
) -> MemoryPlan:
    """Bytes per rank (see the module's doc). `compute_bytes`: model.dtype's bytes (2: bfloat16, the GPU setting;
    4: float32), the dtype the learner computes in and holds frozen weights (the KL reference, LoRA's base) in.
    `cpu_offload` (full fine-tuning): the sharded state in host RAM instead, checked against `host_gib` (0: not)."""
    settings = dict(world_size=world_size, micro_batch_tokens=micro_batch_tokens, checkpointing=checkpointing, gpu_gib=gpu_gib,
                    kl_reference=kl_reference, lora=lora, compute_bytes=compute_bytes, cpu_offload=cpu_offload,
                    host_gib=host_gib, tile=tile)
    P, W, T, cb = shape.parameters, world_size, micro_batch_tokens, compute_bytes
    cpu_offload = cpu_offload and not lora
    parts: dict[str, float] = {}
    host = 0.0
    if lora:
        parts["weights (frozen, model.dtype)"] = P * cb
    else:
        state = {"fp32 weights (sharded)": 4 * P / W, "fp32 gradients (sharded)": 4 * P / W, "AdamW moments (sharded)": 8 * P / W}
        if kl_reference:
            state["KL reference, model.dtype (sharded)"] = cb * P / W
        if cpu_offload:
            host = sum(state.values())
        else:
            parts.update(state)
        if W > 1 or cpu_offload:  # root gathered with its gradients; two layers gathered, one layer's gradients
            parts["FSDP buffers (est.)"] = (2 * cb + 4) * shape.root_parameters + (3 * cb + 4) * shape.layer_parameters
        elif cb == 2:
            parts["autocast bf16 weight copies"] = 2 * P
    layer = max(figure.per_layer(T, padded=False), figure.per_layer(T, padded=True))
    outside = max(figure.per_outside(T, padded=False), figure.per_outside(T, padded=True))
    if checkpointing:
        parts["checkpointed layer inputs"] = shape.layers * figure.boundary * T
        parts["one layer recomputed"] = layer
    else:
        parts["activations, every layer"] = shape.layers * layer
    parts["embeddings, norm, head"] = outside
    # The tiled head's backward (learner/logprobs.py): its fp32 weight gradient, fp32 hidden gradient, two tiles;
    # and the backward's hidden-state gradients in flight (three, bf16).
    parts["head and backward (est.)"] = 4 * shape.vocab * shape.hidden + 4 * shape.hidden * T + 2 * 4 * tile[0] * tile[1] + 3 * 2 * shape.hidden * T
    parts["CUDA context, buffers (est.)"] = FIXED_BYTES
    resident_names = ("fp32 weights (sharded)", "AdamW moments (sharded)", "KL reference, model.dtype (sharded)", "weights (frozen, model.dtype)")
    resident = sum(v for k, v in parts.items() if k in resident_names) + FIXED_BYTES
    return MemoryPlan(
        world_size=W, micro_batch_tokens=T, checkpointing=checkpointing, kl_reference=kl_reference, lora=lora,
        gpu_bytes=int(gpu_gib * GIB), parts={k: int(v) for k, v in parts.items()}, resident_bytes=int(resident),
        peak_bytes=int(sum(parts.values())), settings=settings, cpu_offload=cpu_offload, host_bytes=int(host),
        host_total_bytes=int(host_gib * GIB),
    )


def replan(plan: MemoryPlan, shape: ModelShape, figure: ActivationFigure, **changes) -> MemoryPlan:
    """The same plan with some settings changed."""
    return plan_memory(shape, figure, **{**plan.settings, **changes})


def choose_offload(shape: ModelShape, figure: ActivationFigure, **settings) -> MemoryPlan:
    """`learner.cpu_offload = "auto"`: the plan without offload, unless only offloading makes it fit."""
    plan = plan_memory(shape, figure, **{**settings, "cpu_offload": False})
    if plan.fits or plan.lora:
        return plan
    offloaded = replan(plan, shape, figure, cpu_offload=True)
    return offloaded if offloaded.fits else plan


def bytes_per_rank(shape: ModelShape, figure: ActivationFigure, **settings) -> int:
    """The peak bytes on each learner GPU: the figure a placement plan needs (settings as `plan_memory`'s)."""
    return plan_memory(shape, figure, **settings).peak_bytes


def refusal(plan: MemoryPlan, shape: ModelShape, figure: ActivationFigure) -> str:
    """One line: the plan does not fit, and the changes that would make it fit."""
    fixes = []
    if not plan.checkpointing and replan(plan, shape, figure, checkpointing=True).fits:
        fixes.append("enable learner.activation_checkpointing")
    if not plan.cpu_offload and not plan.lora and replan(plan, shape, figure, cpu_offload=True).fits:
        fixes.append('set learner.cpu_offload = "on" (or "auto": fp32 state in host RAM, slower updates)')
    fitting = _largest_tokens(shape, figure, plan)
    if fitting:
        fixes.append(f"lower learner.micro_batch_tokens to {fitting} (and play.max_context_tokens with it)")
    if not plan.lora:
        for ranks in range(plan.world_size + 1, 65):
            if replan(plan, shape, figure, world_size=ranks).fits:
                fixes.append(f"raise learner.world_size to {ranks}")
                break
            if plan.cpu_offload and replan(plan, shape, figure, world_size=ranks, cpu_offload=False).fits:
                fixes.append(f'raise learner.world_size to {ranks} with learner.cpu_offload = "off"')
                break
    if not fixes:
        fixes.append("enable learner.activation_checkpointing, lower learner.micro_batch_tokens or raise learner.world_size (none alone is enough)")
    where = (f"the offloaded state needs {plan.host_bytes * plan.world_size / GIB:.1f} GiB of host RAM but "
             f"{plan.host_total_bytes * HOST_USABLE_SHARE / GIB:.1f} GiB are usable" if not plan.host_fits else
             f"the learner needs {plan.peak_bytes / GIB:.1f} GiB per GPU but {plan.usable_bytes / GIB:.1f} GiB are usable "
             f"({USABLE_SHARE:.0%} of {plan.gpu_bytes / GIB:g})")
    return (f"{where} at learner.world_size = {plan.world_size}, learner.micro_batch_tokens = {plan.micro_batch_tokens}, "
            f"learner.activation_checkpointing = {str(plan.checkpointing).lower()}, learner.cpu_offload = "
            f"{'on' if plan.cpu_offload else 'off'}: " + ", or ".join(fixes))


def _largest_tokens(shape, figure, plan) -> int:
    """The largest micro_batch_tokens (a multiple of 1024) that fits with the plan's other settings; 0: none."""
    low, high = 0, plan.micro_batch_tokens // 1024
    while low < high:
        mid = (low + high + 1) // 2
        ok = replan(plan, shape, figure, micro_batch_tokens=mid * 1024).fits
        low, high = (mid, high) if ok else (low, mid - 1)
    return low * 1024


# ---------------------------------------------------------------- the command
def _gpu_gib(text: str, gpus: list[int]) -> float | None:
    """--gpu-gb: a number, or "auto": the smallest of the learner's GPUs (None: no GPU visible)."""
    if text != "auto":
        return float(text)
    import torch

    if gpus:
        from engine.protocol.devices import select_gpus

        select_gpus(gpus, "learner.gpus")
    if not torch.cuda.is_available():
        return None
    count = torch.cuda.device_count()
    indices = range(len(gpus)) if gpus else range(count)
    return min(torch.cuda.get_device_properties(i).total_memory for i in indices if i < count) / GIB


def _host_gib(text: str) -> float:
    """--host-gb: a number, or "auto": this machine's RAM."""
    if text != "auto":
        return float(text)
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="learner.memory_plan", description="The learner's GPU memory per rank, from the model's config.")
    parser.add_argument("--model", required=True, help="a model folder or its config.json")
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--gpu-gb", default="80", help="GiB of memory per GPU, or auto (the learner's GPUs; none: skipped)")
    parser.add_argument("--gpus", default="", help="learner.gpus, comma-separated (with --gpu-gb auto)")
    parser.add_argument("--micro-batch-tokens", type=int, default=4096)
    parser.add_argument("--checkpointing", action="store_true", help="learner.activation_checkpointing")
    parser.add_argument("--kl-reference", action="store_true", help="learner.objective.kl_coef > 0 (full fine-tuning)")
    parser.add_argument("--lora", action="store_true", help="learner.lora_rank > 0")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"), help="model.dtype: the compute dtype")
    parser.add_argument("--cpu-offload", default="off", choices=("auto", "on", "off"), help="learner.cpu_offload")
    parser.add_argument("--host-gb", default="auto", help="GiB of the node's RAM (for --cpu-offload), or auto: this machine's")
    args = parser.parse_args(argv)
    gpus = [int(g) for g in args.gpus.split(",") if g.strip()]
    gpu_gib = _gpu_gib(args.gpu_gb, gpus)
    if gpu_gib is None:
        print("learner memory plan: no GPU visible, nothing to check (the learner runs on the CPU)")
        print(json.dumps({"skipped": "no GPU"}))
        return 0
    config = load_model_config(args.model)
    shape = model_shape(config)
    figure = measure_activations(config, dtype=args.dtype)
    settings = dict(world_size=args.world_size, micro_batch_tokens=args.micro_batch_tokens, checkpointing=args.checkpointing,
                    gpu_gib=gpu_gib, kl_reference=args.kl_reference and not args.lora, lora=args.lora,
                    compute_bytes=2 if args.dtype == "bfloat16" else 4, host_gib=_host_gib(args.host_gb))
    if args.cpu_offload == "auto":
        plan = choose_offload(shape, figure, **settings)
    else:
        plan = plan_memory(shape, figure, cpu_offload=args.cpu_offload == "on", **settings)
    print(f"model: {shape.parameters / 1e9:.2f} B parameters, {shape.layers} layers, hidden {shape.hidden}; measured "
          f"{figure.layer[0] / 1024:.1f} KiB a token a layer ({figure.boundary / 1024:.1f} KiB checkpointed), "
          f"{figure.layer_padded[1]:.1f} bytes a token a position when padded")
    if args.cpu_offload == "auto" and plan.cpu_offload:
        print("learner.cpu_offload = auto: on (the fp32 state does not fit the GPUs; it is kept in host RAM)")
    print(plan.summary())
    record = {**plan.record(), "parameters": shape.parameters, "figure": asdict(figure)}
    if not plan.fits:
        record["refusal"] = refusal(plan, shape, figure)
    print(json.dumps(record))
    if not plan.fits:
        print(record["refusal"], file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
