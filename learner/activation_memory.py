"""Activation memory a token, MEASURED on a full-width slice of the model on the CPU (learner/memory_plan.py plans
with it).

    figure = measure_activations(config)        # bytes a token, a 2-layer full-width slice under FakeTensorMode
    figure.per_layer(32768, padded=False)        # one decoder layer's bytes for a micro-batch of 32768 tokens

`measure_activations` builds the model class from the config with 2 decoder layers at full width and runs its
forward and the learner's log-prob head (learner/logprobs.py) under torch's FakeTensorMode: every op goes through
its real dispatch and autograd records exactly the tensors it keeps for backward (counted with
`torch.autograd.graph.saved_tensors_hooks`, each storage once, parameters excluded), but no arithmetic runs, so a
4B-wide layer costs seconds on a CPU (a real bf16 forward and backward of one 4B-wide layer takes minutes on 2
cores). tests/learner/test_memory_plan.py checks that the count equals a real run's on a narrow slice. Each figure
is taken at two lengths and split into a part linear in tokens and one in tokens x sequence length (the attention
mask a padded micro-batch materialises per layer); an unpadded sample (attention mask None) is the flash path,
linear. With `learner.activation_checkpointing` a layer keeps only its input (measured the same way, with
checkpointing on). The part outside the layers is the embeddings, final norm and the log-prob head's saved
tensors, every position a loss position.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

MEASURE_TOKENS = (128, 256)  # the two lengths the activation figures are measured at (their split linear / quadratic)
SLICE_LAYERS = 2  # decoder layers in the measured slice

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



def decoder_layers(model) -> list:
    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"{type(model).__name__} names no _no_split_modules: cannot tell its decoder layers")
    return layers


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
        for index, layer in enumerate(decoder_layers(model)):
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
