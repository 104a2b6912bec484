"""The learner's GPU memory per rank, planned from the model's config.json before anything is loaded.

    python -m learner.memory_plan --model DIR_OR_CONFIG --world-size 8 --gpu-gb 80 --micro-batch-tokens 32768 --checkpointing
    figure = measure_activations(config)                     # bytes a token, measured on a 2-layer full-width slice
    plan = plan_memory(shape, figure, world_size=8, micro_batch_tokens=32768, checkpointing=True, gpu_gib=80)
    plan.peak_bytes, plan.resident_bytes, plan.fits, plan.refusal()   # bytes per rank; one line naming the fix

What a rank holds (full fine-tuning on GPUs: fp32 master weights, computing in `model.dtype`, bf16 on a GPU
node; learner/precision.py, learner/distributed.py):
- state, sharded over `world_size` by FSDP2: fp32 parameters (4 bytes a parameter), fp32 gradients (4, freed
  between updates), AdamW's two fp32 moments (8); the KL reference (`learner.objective.kl_coef` > 0) in
  `model.dtype` (2 in bf16);
- FSDP2's working buffers (world_size > 1; est.): the root's parameters (embeddings, final norm) unsharded in bf16
  with their bf16 and fp32 gradients, two decoder layers unsharded (the one running and the one prefetched) and one
  layer's gradients; one process without FSDP instead keeps autocast's bf16 copy of every weight until the forward
  ends (2 bytes a parameter);
- activations of one micro-batch of `learner.micro_batch_tokens`, which FSDP does not shard. They are MEASURED:
  `measure_activations` builds the model class from the config with 2 decoder layers at full width and runs its
  forward and the learner's log-prob head (learner/logprobs.py) under torch's FakeTensorMode: every op goes
  through its real dispatch and autograd records exactly the tensors it keeps for backward (counted with
  `torch.autograd.graph.saved_tensors_hooks`, each storage once, parameters excluded), but no arithmetic runs, so
  a 4B-wide layer costs seconds on a CPU (a real bf16 forward and backward of one 4B-wide layer takes minutes on 2
  cores). tests/learner/test_memory_plan.py checks that the count equals a real run's on a narrow slice. Each
  figure is taken at two lengths and split into a part linear in tokens and one in tokens x sequence length (the
  attention mask a padded micro-batch materialises per layer); an unpadded sample (attention mask None) is the
  flash path, linear. Without checkpointing every layer keeps its tensors; with `learner.activation_checkpointing`
  a layer keeps only its input (measured the same way, with checkpointing on) and one layer at a time is
  recomputed during backward. Plus the part outside the layers (embeddings, final norm, the log-prob head's saved
  tensors, every position a loss position) and the head's backward (its fp32 weight gradient and tiles; est.).
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
import contextlib
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

GIB = 1 << 30
USABLE_SHARE = 0.9  # of a GPU's memory a plan may fill (CUDA context, caching-allocator fragmentation: est.)
MEASURE_TOKENS = (128, 256)  # the two lengths the activation figures are measured at (their split linear / quadratic)
SLICE_LAYERS = 2  # decoder layers in the measured slice
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
class ActivationFigure:
    """Bytes a micro-batch keeps for backward, per token: `a + b * seq` for a sequence length `seq` (measured)."""

    layer: tuple[float, float]  # one decoder layer, an unpadded sample (no attention mask: the flash path)
    layer_padded: tuple[float, float]  # one decoder layer, a padded micro-batch (the mask materialised)
    outside: tuple[float, float]  # embeddings, final norm and the log-prob head, every position a loss position
    outside_padded: tuple[float, float]
    boundary: float  # one checkpointed layer: what it keeps (its input), linear in tokens
    dtype: str = "bfloat16"
    tokens: tuple[int, ...] = MEASURE_TOKENS

    def per_layer(self, tokens: int, *, padded: bool) -> float:
        """One layer's bytes for a micro-batch of `tokens` at its worst sequence length: one row of `tokens`
        unpadded; padded, at least two rows, so no row is longer than tokens / 2."""
        a, b = self.layer_padded if padded else self.layer
        return tokens * (a + b * (tokens / 2 if padded else tokens))

    def per_outside(self, tokens: int, *, padded: bool) -> float:
        a, b = self.outside_padded if padded else self.outside
        return tokens * (a + b * (tokens / 2 if padded else tokens))


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

    @property
    def usable_bytes(self) -> int:
        return int(self.gpu_bytes * USABLE_SHARE)

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.usable_bytes

    def summary(self) -> str:
        lines = [f"learner memory plan: {self.world_size} rank(s), micro-batch {self.micro_batch_tokens} tokens, "
                 f"activation checkpointing {'on' if self.checkpointing else 'off'}"
                 f"{', KL reference' if self.kl_reference else ''}{', LoRA' if self.lora else ''}"]
        lines += [f"  {name:<28} {value / GIB:8.2f} GiB" for name, value in self.parts.items()]
        lines.append(f"  {'peak per rank':<28} {self.peak_bytes / GIB:8.2f} GiB of {self.usable_bytes / GIB:.2f} usable "
                     f"({USABLE_SHARE:.0%} of {self.gpu_bytes / GIB:.0f}): {'fits' if self.fits else 'does NOT fit'}")
        return "\n".join(lines)

    def record(self) -> dict:
        return {
            "world_size": self.world_size, "micro_batch_tokens": self.micro_batch_tokens,
            "checkpointing": self.checkpointing, "kl_reference": self.kl_reference, "lora": self.lora,
            "gpu_bytes": self.gpu_bytes, "usable_bytes": self.usable_bytes, "resident_bytes": self.resident_bytes,
            "peak_bytes": self.peak_bytes, "fits": self.fits, "parts": {k: int(v) for k, v in self.parts.items()},
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


def _decoder_layers(model) -> list:
    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"{type(model).__name__} names no _no_split_modules: cannot tell its decoder layers")
    return layers


def model_shape(config) -> ModelShape:
    """Count the parameters of the model the config describes, built on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    parameters = sum(p.numel() for p in model.parameters())
    layers = _decoder_layers(model)
    layer_parameters = max(sum(p.numel() for p in layer.parameters()) for layer in layers)
    root = parameters - sum(sum(p.numel() for p in layer.parameters()) for layer in layers)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return ModelShape(parameters=parameters, layers=len(layers), layer_parameters=layer_parameters, root_parameters=root,
                      hidden=int(text.hidden_size), vocab=int(text.vocab_size))


# ---------------------------------------------------------------- the measurement
def _slice_config(config, layers: int):
    import copy

    sliced = copy.deepcopy(config)
    sliced.num_hidden_layers = layers
    if isinstance(getattr(sliced, "layer_types", None), list):
        sliced.layer_types = sliced.layer_types[:layers]
    sliced._attn_implementation = "sdpa"  # what the learner loads (from_pretrained's default)
    return sliced


class SavedTensorCounter:
    """Bytes autograd keeps for backward, by where they were saved: decoder layer i, or "outside" (also every
    storage saved in more than one place, such as the rotary tables). Each storage counts once; parameters none."""

    def __init__(self, model):
        self.parameters = {p.untyped_storage()._cdata for p in model.parameters()}
        self.where = "outside"
        self.saved: dict[int, tuple[set, int]] = {}  # storage id -> (places, bytes)
        self.inputs: dict[int, tuple[set, int]] = {}  # a checkpointed layer's tensor inputs, the same way
        self.handles = []
        for index, layer in enumerate(_decoder_layers(model)):
            self.handles.append(layer.register_forward_pre_hook(self._enter(f"layer{index}"), with_kwargs=True))
            self.handles.append(layer.register_forward_hook(self._leave))

    def _enter(self, name):
        def hook(module, args, kwargs):
            self.where = name
            for value in list(args) + list(kwargs.values()):
                if hasattr(value, "untyped_storage"):
                    self._add(self.inputs, value, name)
        return hook

    def _leave(self, module, args, output):
        self.where = "outside"

    def _add(self, table, tensor, place):
        storage = tensor.untyped_storage()
        if storage._cdata in self.parameters:
            return
        places, size = table.get(storage._cdata, (set(), storage.nbytes()))
        places.add(place)
        table[storage._cdata] = (places, size)

    def pack(self, tensor):
        self._add(self.saved, tensor, self.where)
        return tensor

    def by_place(self, table=None) -> dict[str, int]:
        out: dict[str, int] = {}
        for places, size in (self.saved if table is None else table).values():
            place = next(iter(places)) if len(places) == 1 else "outside"
            out[place] = out.get(place, 0) + size
        return out

    def close(self):
        for handle in self.handles:
            handle.remove()


def count_saved(model, tokens: int, *, padded: bool, checkpointing: bool = False) -> dict[str, int]:
    """Run the learner's log-prob path (learner/logprobs.py `sequence_logprobs`, every position) on one row of
    `tokens` random ids and count what autograd keeps: {"layer0": bytes, ..., "outside": bytes, "boundary": bytes a
    checkpointed layer keeps}. `padded`: an attention mask is passed (a padded micro-batch's path; with
    transformers' sdpa an all-ones mask of real tensors is dropped, so a real run gets a zero in it); else the
    unpadded path (`_unpadded_mask`)."""
    import torch

    from learner.logprobs import sequence_logprobs

    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (1, tokens))
    mask = torch.ones_like(ids) if padded else _unpadded_mask(model.config)
    if padded and not _is_fake(ids):
        mask[0, 0] = 0  # a left-padded row: the mask is materialised, as in a real padded micro-batch
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    counter = SavedTensorCounter(model)
    try:
        with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
            logprobs = sequence_logprobs(model, ids, mask, 1.0)
        logprobs.sum().backward()
    finally:
        counter.close()
        if checkpointing:
            model.gradient_checkpointing_disable()
    found = counter.by_place()
    layer_inputs = counter.by_place(counter.inputs)
    found["boundary"] = max((v for k, v in layer_inputs.items() if k.startswith("layer")), default=0) if checkpointing else 0
    return found


def _unpadded_mask(config) -> dict:
    """"No mask" per attention kind, handed to the model as its precomputed mask mapping: the path transformers
    takes for a row without padding (sdpa's is_causal, grouped KV heads), which under FakeTensorMode it would not
    choose by itself (it cannot read a fake mask's values, so it builds one)."""
    kinds = getattr(config, "layer_types", None) or ["full_attention"]
    return {kind: None for kind in set(kinds) | {"full_attention"}}


def _is_fake(tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(tensor, FakeTensor)


def build_slice(config, *, layers: int = SLICE_LAYERS, dtype: str = "bfloat16"):
    """The model class from `config` with `layers` decoder layers, full width, parameters in `dtype`, train mode.
    Built inside the caller's FakeTensorMode when there is one (no memory, no arithmetic)."""
    import torch
    from transformers import AutoModelForCausalLM

    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        model = AutoModelForCausalLM.from_config(_slice_config(config, layers))
    finally:
        torch.set_default_dtype(previous)
    return model.train()


def _fit(tokens: tuple[int, int], values: tuple[float, float]) -> tuple[float, float]:
    """(a, b) with values[i] = tokens[i] * (a + b * tokens[i]): per token, a part linear and one per position."""
    (t1, t2), (v1, v2) = tokens, values
    b = max(0.0, (v2 / t2 - v1 / t1) / (t2 - t1))
    return v1 / t1 - b * t1, b


def measure_activations(config, *, dtype: str = "bfloat16", tokens: tuple[int, int] = MEASURE_TOKENS, fake: bool = True) -> ActivationFigure:
    """The activation figures of `config`'s model, measured on a 2-layer full-width slice (see the module's doc).
    `fake=False` runs the real arithmetic instead (tests compare the two on a narrow model)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() if fake else contextlib.nullcontext():
        torch.manual_seed(0)
        model = build_slice(config, dtype=dtype)
        runs = {(n, padded): count_saved(model, n, padded=padded) for n in tokens for padded in (False, True)}
        boundary = count_saved(model, tokens[-1], padded=False, checkpointing=True)

    def layer_bytes(found):
        return max(v for k, v in found.items() if k.startswith("layer"))

    def pair(padded, pick):
        return _fit(tokens, tuple(float(pick(runs[(n, padded)])) for n in tokens))

    return ActivationFigure(
        layer=pair(False, layer_bytes), layer_padded=pair(True, layer_bytes),
        outside=pair(False, lambda f: f["outside"]), outside_padded=pair(True, lambda f: f["outside"]),
        boundary=boundary["boundary"] / tokens[-1], dtype=dtype, tokens=tuple(tokens),
    )


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
    tile: tuple[int, int] = (1024, 8192),
) -> MemoryPlan:
    """Bytes per rank (see the module's doc). `compute_bytes`: model.dtype's bytes (2: bfloat16, the GPU setting;
    4: float32), the dtype the learner computes in and holds frozen weights (the KL reference, LoRA's base) in."""
    P, W, T, cb = shape.parameters, world_size, micro_batch_tokens, compute_bytes
    parts: dict[str, float] = {}
    if lora:
        parts["weights (frozen, model.dtype)"] = P * cb
    else:
        parts["fp32 weights (sharded)"] = 4 * P / W
        parts["fp32 gradients (sharded)"] = 4 * P / W
        parts["AdamW moments (sharded)"] = 8 * P / W
        if kl_reference:
            parts["KL reference, model.dtype (sharded)"] = cb * P / W
        if W > 1:  # root gathered with its gradients; two layers gathered, one layer's gradients
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
        peak_bytes=int(sum(parts.values())),
    )


def bytes_per_rank(shape: ModelShape, figure: ActivationFigure, **settings) -> int:
    """The peak bytes on each learner GPU: the figure a placement plan needs (settings as `plan_memory`'s)."""
    return plan_memory(shape, figure, **settings).peak_bytes


def refusal(plan: MemoryPlan, shape: ModelShape, figure: ActivationFigure, gpu_gib: float, compute_bytes: int = 2) -> str:
    """One line: the plan does not fit, and the changes that would make it fit."""
    settings = dict(kl_reference=plan.kl_reference, lora=plan.lora, gpu_gib=gpu_gib, compute_bytes=compute_bytes)
    fixes = []
    if not plan.checkpointing and plan_memory(shape, figure, world_size=plan.world_size, micro_batch_tokens=plan.micro_batch_tokens,
                                              checkpointing=True, **settings).fits:
        fixes.append("enable learner.activation_checkpointing")
    fitting = _largest_tokens(shape, figure, plan, settings)
    if fitting:
        fixes.append(f"lower learner.micro_batch_tokens to {fitting} (and play.max_context_tokens with it)")
    if not plan.lora:
        for ranks in range(plan.world_size + 1, 65):
            if plan_memory(shape, figure, world_size=ranks, micro_batch_tokens=plan.micro_batch_tokens,
                           checkpointing=plan.checkpointing, **settings).fits:
                fixes.append(f"raise learner.world_size to {ranks}")
                break
    if not fixes:
        fixes.append("enable learner.activation_checkpointing, lower learner.micro_batch_tokens or raise learner.world_size (none alone is enough)")
    return (f"the learner needs {plan.peak_bytes / GIB:.1f} GiB per GPU but {plan.usable_bytes / GIB:.1f} GiB are usable "
            f"({USABLE_SHARE:.0%} of {gpu_gib:g}) at learner.world_size = {plan.world_size}, learner.micro_batch_tokens = "
            f"{plan.micro_batch_tokens}, learner.activation_checkpointing = {str(plan.checkpointing).lower()}: " + ", or ".join(fixes))


def _largest_tokens(shape, figure, plan, settings) -> int:
    """The largest micro_batch_tokens (a multiple of 1024) that fits with the plan's other settings; 0: none."""
    low, high = 0, plan.micro_batch_tokens // 1024
    while low < high:
        mid = (low + high + 1) // 2
        ok = plan_memory(shape, figure, world_size=plan.world_size, micro_batch_tokens=mid * 1024,
                         checkpointing=plan.checkpointing, **settings).fits
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
    plan = plan_memory(shape, figure, world_size=args.world_size, micro_batch_tokens=args.micro_batch_tokens,
                       checkpointing=args.checkpointing, gpu_gib=gpu_gib, kl_reference=args.kl_reference and not args.lora,
                       lora=args.lora, compute_bytes=2 if args.dtype == "bfloat16" else 4)
    print(f"model: {shape.parameters / 1e9:.2f} B parameters, {shape.layers} layers, hidden {shape.hidden}; measured "
          f"{figure.layer[0] / 1024:.1f} KiB a token a layer ({figure.boundary / 1024:.1f} KiB checkpointed), "
          f"{figure.layer_padded[1]:.1f} bytes a token a position when padded")
    print(plan.summary())
    record = {**plan.record(), "parameters": shape.parameters, "figure": asdict(figure)}
    if not plan.fits:
        record["refusal"] = refusal(plan, shape, figure, gpu_gib, 2 if args.dtype == "bfloat16" else 4)
    print(json.dumps(record))
    if not plan.fits:
        print(record["refusal"], file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
