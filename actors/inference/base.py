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
