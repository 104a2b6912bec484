"""The inference backend interface: one per rollout worker, driven from a thread by the batcher.

A backend takes a batch of token-level requests and returns, for each, the sampled token ids, the sampled
tokens' log-probs and the decoded text; it loads new weights between batches. Requests carry token ids, not
chat messages: agents build multi-turn contexts token by token (actors/chat.py), so what is trained is exactly
what was sampled.

Recorded log-probs are those of the temperature-scaled distribution, log softmax(logits / T), before top-k/top-p
truncation: the learner recomputes exactly this quantity (learner/logprobs.py).

Stop strings (`GenerationRequest.stop`): a reply ends with the token that completes the first of them in its text,
that token kept (`cut_at_stop`, which every backend applies the same way), with finish_reason "stop". The agent
uses them to end a reply at its action (actors/agent.py `stop_strings`).
"""

from __future__ import annotations

import abc
from typing import Literal

import msgspec

from engine.protocol.errors import InputError

RequestRole = Literal["designer", "hint", "agent"]


class GenerationRequest(msgspec.Struct, frozen=True, kw_only=True):
    prompt_ids: list[int]
    max_new_tokens: int
    temperature: float
    top_p: float = 1.0
    top_k: int = 0
    role: RequestRole = "agent"  # lets a scripted backend choose what to say
    stop: tuple[str, ...] = ()  # stop strings: the reply ends at the first one it completes (kept in the reply)


def cut_at_stop(tokenizer, ids: list[int], stop) -> list[int] | None:
    """`ids` up to and including the token that completes the first of the `stop` strings in their decoded text;
    None when none occurs. The fewest tokens whose text reaches the end of the earliest stop string."""
    if not stop or not ids:
        return None
    text = tokenizer.decode(ids, skip_special_tokens=True)
    ends = [text.find(s) + len(s) for s in stop if s and s in text]
    if not ends:
        return None
    end, low, high = min(ends), 1, len(ids)
    while low < high:
        middle = (low + high) // 2
        if len(tokenizer.decode(ids[:middle], skip_special_tokens=True)) >= end:
            high = middle
        else:
            low = middle + 1
    return ids[:low]


class Generation(msgspec.Struct, frozen=True, kw_only=True):
    completion_ids: list[int]
    logprobs: list[float]
    text: str  # decoded without special tokens
    finish_reason: Literal["stop", "length"]
    policy_version: int


class InferenceBackend(abc.ABC):
    """Blocking calls; the worker runs them in a thread via the batcher."""

    name: str = "base"
    policy_version: int = 0

    @property
    @abc.abstractmethod
    def tokenizer(self): ...

    @abc.abstractmethod
    def generate(self, requests: list[GenerationRequest]) -> list[Generation]: ...

    @abc.abstractmethod
    def load_weights(self, path: str, version: int) -> None: ...

    # Time-shared GPUs (engine/protocol/placement.py): the worker's engine frees its GPU memory while the learner
    # updates and takes it back before the next rollouts; the batcher calls these between batches, never during one,
    # and loads the new weights after `wake_up`. A backend with nothing on a GPU has nothing to free.
    def sleep(self) -> None:
        """Free this backend's GPU memory (weights may go to host RAM; caches are dropped)."""

    def wake_up(self) -> None:
        """Take back what `sleep` freed; the next `load_weights` or `generate` finds the backend as before."""


INSTALL_GPU = "pip install -e '.[gpu]'"


class AutoNeedsVLLM(InputError, RuntimeError):
    """inference.backend = "auto" on a GPU machine where vLLM does not import: a refusal, not a slow fallback."""


def backend_kind(config) -> str:
    """The backend `config.inference.backend` names, with "auto" resolved: vLLM where it imports (a LoRA adapter is
    merged into full weights for it: actors/inference/adapter_merge.py), else transformers on a CPU machine. On a
    machine with a GPU, where the transformers backend would generate on it (inference.device not "cpu"), "auto"
    without vLLM is refused (AutoNeedsVLLM): it is almost always a missing or broken GPU install, and generating
    with transformers instead is many times slower; `inference.backend = "transformers"` asks for that explicitly."""
    kind = config.inference.backend
    if kind == "auto":
        kind = "vllm" if _vllm_imports(config.inference) else "transformers"
    return kind


def build_backend(config, model_path: str, *, sleep_mode: bool = False) -> InferenceBackend:
    """The backend named by `config.inference.backend` (imports torch / vLLM lazily). `sleep_mode`: it will be put to
    sleep while the learner updates (the time-shared placement; vLLM must be started with it)."""
    kind = backend_kind(config)
    if kind == "transformers":
        from actors.inference.hf import TransformersBackend, inference_device

        return TransformersBackend(model_path, dtype=config.model.dtype, seed=config.run.seed, device=inference_device(config.inference))
    if kind == "scripted":
        from actors.inference.scripted import ScriptedBackend

        return ScriptedBackend(model_path, config.inference.script, seed=config.run.seed)
    if kind == "timed":
        from actors.inference.timed import TimedBackend

        i = config.inference
        return TimedBackend(
            model_path, seconds_per_token=i.timed_seconds_per_token, median_tokens=i.timed_median_tokens,
            sigma=i.timed_sigma, max_tokens=i.timed_max_tokens, seed=config.run.seed, capacity=i.timed_capacity,
        )
    if kind == "vllm":
        from actors.inference.vllm import VLLMBackend, require_vllm

        require_vllm()  # a one-line error naming the install command
        return VLLMBackend(model_path, config.inference, dtype=config.model.dtype, seed=config.run.seed, sleep_mode=sleep_mode)
    raise ValueError(f"unknown inference backend {kind!r}")


def _vllm_imports(inference) -> bool:
    """Whether vLLM imports here (the "auto" backend's choice). Where it does not: on a GPU machine AutoNeedsVLLM
    (backend_kind says why); on a CPU machine False, with a line saying why when an install is there but broken."""
    import importlib
    import importlib.util

    try:
        importlib.import_module("vllm")
    except Exception as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if _gpu_would_generate(inference):
            raise AutoNeedsVLLM(
                f"inference.backend = 'auto' on a machine with a GPU needs vLLM, which does not import here ({reason}): "
                f"install it ({INSTALL_GPU}), or set inference.backend = 'transformers' to generate with transformers "
                "on the GPU (much slower)"
            ) from None
        if importlib.util.find_spec("vllm") is not None:  # an install that does not load: transformers, with a note why
            print(f"inference.backend = 'auto': vLLM is installed but does not import ({reason}); using transformers", flush=True)
        return False
    return True


def _gpu_would_generate(inference) -> bool:
    """Whether the transformers backend would generate on a GPU here (inference.device not "cpu", CUDA visible)."""
    if inference.device == "cpu":
        return False
    import torch

    return torch.cuda.is_available()
