"""The `transformers` inference backend: batched sampling with per-token log-probs, on CPU or GPU.

Requests with the same sampling parameters are generated together (left-padded); each is cut at its own
`max_new_tokens` afterwards, which equals stopping it early since sampling is autoregressive.

A published policy folder is either a full model or, when the learner trains LoRA (`learner.lora_rank > 0`),
only an adapter (adapter_config.json + adapter_model.safetensors). `PolicyLoader` (shared by the backends)
keeps the base model the worker started with in memory while adapters arrive, and applies each new adapter to
a fresh copy of it, merged, so generation runs at the base model's speed and only the adapter travels.

Device. `inference_device` picks where it generates (`inference.device`): a GPU when one is visible (the first of
`inference.gpus`, else GPU 0; this backend runs on one GPU, with no tensor parallelism), else the CPU. Every model
the loader returns (the base, a full policy, a merged adapter) is moved there, and the input tensors of `generate`
and `score` follow the model's device.
"""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import torch

from actors.inference.base import Generation, GenerationRequest, InferenceBackend, cut_at_stop
from engine.protocol.devices import select_gpus
from engine.protocol.errors import InputError


class DeviceError(InputError, ValueError):
    """inference.device names a device this machine does not have."""


def inference_device(inference) -> str:
    """Where the transformers backend generates, from `inference.device` (auto: cuda when a GPU is visible, else
    cpu) and `inference.gpus` (the first listed GPU is made the only visible one, so it is "cuda:0"; empty: GPU 0).
    The GPU selection happens before CUDA starts (torch.cuda.is_available fixes the visible devices)."""
    if inference.device == "cpu":
        return "cpu"
    try:
        select_gpus(inference.gpus[:1], "inference.gpus")
    except ValueError as exc:
        raise DeviceError(str(exc)) from None
    if torch.cuda.is_available():
        return "cuda:0"
    if inference.device == "cuda":
        raise DeviceError("inference.device is cuda but no GPU is visible here: set inference.device = 'auto' or 'cpu'")
    return "cpu"


def load_model(path: str, dtype: str = "float32", device: str = "cpu"):
    """The causal LM in `path`, in eval mode, with `dtype` weights on `device`."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    model.to(device)
    model.eval()
    return model


ADAPTER_CONFIG = "adapter_config.json"


def is_adapter_folder(path: str | Path) -> bool:
    """Whether `path` holds a peft adapter (published by a LoRA learner) rather than a full model."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def apply_adapter(base, path: str | Path, device: str = "cpu"):
    """A copy of `base` with the adapter in `path` merged into its weights (`base` itself is left as it was), on
    `device` (the copy is made where `base` is; the adapter's weights are moved to it)."""
    from peft import PeftModel

    model = PeftModel.from_pretrained(copy.deepcopy(base), str(path)).merge_and_unload()
    model.to(device)
    model.eval()
    return model


class PolicyLoader:
    """Loads each published policy: a full model folder as is, an adapter onto the base model kept in memory.

    The base is the model at `base_path` (the one the worker started with); it is dropped once a full model
    arrives (full fine-tuning: no second copy is held) and reloaded from `base_path` if an adapter comes later.
    Every model it returns, and the base it keeps, is on `device`.
    """

    def __init__(self, base_path: str, dtype: str = "float32", device: str = "cpu"):
        self.base_path = base_path
        self.dtype = dtype
        self.device = device
        self.base = None

    def load_base(self):
        self.base = load_model(self.base_path, self.dtype, self.device)
        return self.base

    def load(self, path: str):
        if is_adapter_folder(path):
            base = self.base if self.base is not None else self.load_base()
            return apply_adapter(base, path, self.device)
        self.base = None
        return load_model(path, self.dtype, self.device)


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def stop_token_ids(tokenizer) -> list[int]:
    ids = {tokenizer.eos_token_id}
    for text in ("<|im_end|>", "<|endoftext|>"):
        token = tokenizer.convert_tokens_to_ids(text)
        if isinstance(token, int) and token != tokenizer.unk_token_id and token is not None:
            ids.add(token)
    return sorted(i for i in ids if i is not None)


def sampled_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / T)[token] in fp32, before top-k/top-p: the learner's definition (learner/logprobs.py;
    tests/learner/test_logprobs.py checks that the two agree). logits [batch, n, vocab] predict tokens [batch, n]."""
    scale = temperature if temperature > 0 else 1.0
    return torch.log_softmax(logits.float() / scale, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


class TransformersBackend(InferenceBackend):
    name = "transformers"

    def __init__(self, model_path: str, *, dtype: str = "float32", seed: int = 0, device: str = "cpu"):
        self._tokenizer = load_tokenizer(model_path)
        self.loader = PolicyLoader(model_path, dtype, device)
        self.model = self.loader.load_base()
        self.dtype = dtype
        self.device = device
        self.stop_ids = stop_token_ids(self._tokenizer)
        torch.manual_seed(seed)

    @property
    def tokenizer(self):
        return self._tokenizer

    def sleep(self) -> None:
        """Time-shared GPUs: the model (and the base kept for LoRA adapters) to host RAM while the learner updates,
        its GPU memory released; a no-op on the CPU."""
        self._move("cpu")

    def wake_up(self) -> None:
        """Back onto the GPU `sleep` took the model from."""
        self._move(self.device)

    def _move(self, device: str) -> None:
        if self.device == "cpu":
            return
        for model in {id(m): m for m in (self.model, self.loader.base) if m is not None}.values():
            model.to(device)
        if device == "cpu":
            torch.cuda.empty_cache()

    def load_weights(self, path: str, version: int) -> None:
        """The policy published at `path`: a full model folder, or a LoRA adapter applied to the base model. The
        current model is let go first, so a GPU never holds the old and the new policy at once."""
        self.model = None
        self.model = self.loader.load(path)
        self.policy_version = version

    @torch.no_grad()
    def score(self, prompt_ids: list[int], completion_ids: list[int], temperature: float) -> list[float]:
        """The log-prob of each completion token after the prompt, by one forward pass of the current model."""
        full = torch.tensor([prompt_ids + completion_ids], dtype=torch.long, device=self.model.device)
        logits = self.model(input_ids=full, attention_mask=torch.ones_like(full), use_cache=False).logits
        predicting = logits[:, len(prompt_ids) - 1 : -1]  # position t - 1 predicts token t
        return sampled_logprobs(predicting, full[:, len(prompt_ids) :], temperature)[0].tolist()

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        results: dict[int, Generation] = {}
        key = lambda item: (item[1].temperature, item[1].top_p, item[1].top_k, item[1].stop)  # noqa: E731
        for _, group in itertools.groupby(sorted(enumerate(requests), key=key), key=key):
            group = list(group)
            for (index, _), generation in zip(group, self._generate_group([r for _, r in group])):
                results[index] = generation
        return [results[i] for i in range(len(requests))]

    @torch.no_grad()
    def _generate_group(self, requests: list[GenerationRequest]) -> list[Generation]:
        pad = self._tokenizer.pad_token_id
        width = max(len(r.prompt_ids) for r in requests)
        input_ids = torch.full((len(requests), width), pad, dtype=torch.long)
        attention = torch.zeros((len(requests), width), dtype=torch.long)
        for row, request in enumerate(requests):
            n = len(request.prompt_ids)
            input_ids[row, width - n :] = torch.tensor(request.prompt_ids, dtype=torch.long)
            attention[row, width - n :] = 1
        input_ids, attention = input_ids.to(self.model.device), attention.to(self.model.device)
        first = requests[0]
        sampling = first.temperature > 0
        kwargs = dict(do_sample=True, temperature=first.temperature, top_p=first.top_p, top_k=first.top_k or None)
        stops = dict(stop_strings=list(first.stop), tokenizer=self._tokenizer) if first.stop else {}
        output = self.model.generate(
            input_ids=input_ids,
            attention_mask=attention,
            max_new_tokens=max(r.max_new_tokens for r in requests),
            eos_token_id=self.stop_ids,
            pad_token_id=pad,
            return_dict_in_generate=True,
            output_logits=True,
            **(kwargs if sampling else dict(do_sample=False)),
            **stops,
        )
        new_tokens = output.sequences[:, width:]
        logits = torch.stack(output.logits, dim=1)  # [batch, new, vocab], raw (before processors)
        logp = sampled_logprobs(logits, new_tokens, first.temperature if sampling else 1.0)
        generations = []
        for row, request in enumerate(requests):
            ids = new_tokens[row].tolist()[: request.max_new_tokens]
            finish = "length"
            for position, token in enumerate(ids):
                if token in self.stop_ids:
                    ids = ids[: position + 1]
                    finish = "stop"
                    break
            cut = cut_at_stop(self._tokenizer, ids, request.stop)  # a row that stopped goes on as padding
            if cut is not None:
                ids, finish = cut, "stop"
            generations.append(
                Generation(
                    completion_ids=ids,
                    logprobs=logp[row, : len(ids)].tolist(),
                    text=self._tokenizer.decode(ids, skip_special_tokens=True),
                    finish_reason=finish,
                    policy_version=self.policy_version,
                )
            )
        return generations
