"""The inference backend interface: one per rollout worker, driven from a thread by the batcher.

A backend takes a batch of token-level requests and returns, for each, the sampled token ids, the sampled
tokens' log-probs and the decoded text; it loads new weights between batches. Requests carry token ids, not
chat messages: agents build multi-turn contexts token by token (actors/chat.py), so what is trained is exactly
what was sampled.

Recorded log-probs are those of the temperature-scaled distribution, log softmax(logits / T), before top-k/top-p
truncation: the learner recomputes exactly this quantity (learner/logprobs.py).
"""

from __future__ import annotations

import abc
from typing import Literal

import msgspec

RequestRole = Literal["designer", "hint", "agent"]


class GenerationRequest(msgspec.Struct, frozen=True, kw_only=True):
    prompt_ids: list[int]
    max_new_tokens: int
    temperature: float
    top_p: float = 1.0
    top_k: int = 0
    role: RequestRole = "agent"  # lets a scripted backend choose what to say


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


def backend_kind(config) -> str:
    """The backend `config.inference.backend` names, with "auto" resolved: vLLM where it imports (a LoRA adapter is
    merged into full weights for it: actors/inference/adapter_merge.py), else transformers."""
    kind = config.inference.backend
    if kind == "auto":
        kind = "vllm" if _vllm_imports() else "transformers"
    return kind


def build_backend(config, model_path: str) -> InferenceBackend:
    """The backend named by `config.inference.backend` (imports torch / vLLM lazily)."""
    kind = backend_kind(config)
    if kind == "transformers":
        from actors.inference.hf import TransformersBackend

        return TransformersBackend(model_path, dtype=config.model.dtype, seed=config.run.seed)
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
        return VLLMBackend(model_path, config.inference, dtype=config.model.dtype, seed=config.run.seed)
    raise ValueError(f"unknown inference backend {kind!r}")


def _vllm_imports() -> bool:
    """Whether vLLM is installed here (the "auto" backend's choice); a broken install counts as none, said once."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # an install that does not load: the transformers backend, with a note why
        print(f"inference.backend = 'auto': vLLM is installed but does not import ({exc}); using transformers", flush=True)
        return False
    return True
