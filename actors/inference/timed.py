"""A timed fake backend for benchmarks: no model, a fixed time per generated token for every concurrent request.

Each request draws a completion length from a log-normal (median `median_tokens`, sigma `sigma`, capped at
`max_tokens` and at the request's `max_new_tokens`) and takes `seconds_per_token` per token, independently of
how many others run (continuous batching on an accelerator that is not saturated), or, with `capacity` > 0, at
most that many decode at once and the others wait for a slot (a server with a fixed batch of sequences). It answers with a boxed
1 or 2 and random token ids, so the rest of the engine (sandbox, storage, learner loop) does its real work.
It is natively concurrent: the batcher hands it each request as it arrives (`generate_async`).
"""

from __future__ import annotations

import math
import random

import trio

from actors.inference.base import Generation, GenerationRequest, InferenceBackend
from actors.inference.hf import load_tokenizer


class TimedBackend(InferenceBackend):
    name = "timed"

    def __init__(self, model_path: str, *, seconds_per_token: float, median_tokens: float, sigma: float, max_tokens: int, seed: int = 0, capacity: int = 0):
        self._tokenizer = load_tokenizer(model_path)
        self.seconds_per_token = seconds_per_token
        self.median_tokens = median_tokens
        self.sigma = sigma
        self.max_tokens = max_tokens
        self._rng = random.Random(seed)
        self._vocab = len(self._tokenizer)
        self.capacity = capacity
        self._slots: trio.CapacityLimiter | None = None  # made in the worker's trio run

    @property
    def tokenizer(self):
        return self._tokenizer

    def load_weights(self, path: str, version: int) -> None:
        self.policy_version = version

    def _length(self, request: GenerationRequest) -> int:
        drawn = int(self._rng.lognormvariate(math.log(self.median_tokens), self.sigma))
        return max(1, min(drawn, self.max_tokens, request.max_new_tokens))

    def _answer(self, request: GenerationRequest) -> Generation:
        n = self._length(request)
        text = f"\\boxed{{{self._rng.choice('12')}}}"
        ids = [self._rng.randrange(self._vocab) for _ in range(n)]
        return Generation(completion_ids=ids, logprobs=[-1.0] * n, text=text, finish_reason="length", policy_version=self.policy_version)

    async def generate_async(self, request: GenerationRequest) -> Generation:
        generation = self._answer(request)
        if self.capacity <= 0:
            await trio.sleep(len(generation.completion_ids) * self.seconds_per_token)
            return generation
        if self._slots is None:
            self._slots = trio.CapacityLimiter(self.capacity)
        async with self._slots:
            await trio.sleep(len(generation.completion_ids) * self.seconds_per_token)
        return generation

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        return [self._answer(r) for r in requests]
