"""A scripted inference backend for tests: it says chosen completions and scores them with a real model.

The script is a JSON file `{"designer": [...], "hint": [...], "agent": [...]}`; each role's completions are
used in turn (cycling). Each completion is tokenized, cut at `max_new_tokens`, ended with the stop token, and
scored by a forward pass of the real model, so its log-probs are the model's own (at the request's temperature)
and training on it is real training.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from actors.inference.base import Generation, GenerationRequest, cut_at_stop
from actors.inference.hf import TransformersBackend
from engine.protocol.errors import InputError

ROLES = ("designer", "hint", "agent")


class ScriptError(InputError, ValueError):
    pass


def load_script(path: str) -> dict[str, list[str]]:
    file = Path(path)
    if not file.is_file():
        raise ScriptError(f"inference.script {path} does not exist")
    data = json.loads(file.read_text())
    for role in ROLES:
        items = data.get(role)
        if not isinstance(items, list) or not items or not all(isinstance(x, str) for x in items):
            raise ScriptError(f"inference.script {path}: {role!r} must be a non-empty list of strings")
    return {role: data[role] for role in ROLES}


class ScriptedBackend(TransformersBackend):
    """The transformers backend (model, tokenizer, weight loading) with scripted instead of sampled text."""

    name = "scripted"

    def __init__(self, model_path: str, script_path: str, *, seed: int = 0):
        super().__init__(model_path, seed=seed)
        self.script = load_script(script_path)
        self.counters = {role: 0 for role in ROLES}
        eos = self._tokenizer.eos_token_id
        self.stop_id = eos if eos in self.stop_ids else self.stop_ids[0]  # end each turn as the chat template does

    def _next_text(self, role: str) -> str:
        items = self.script[role]
        text = items[self.counters[role] % len(items)]
        self.counters[role] += 1
        return text

    @torch.no_grad()
    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        out = []
        for request in requests:
            ids = self._tokenizer(self._next_text(request.role), add_special_tokens=False)["input_ids"]
            cut = cut_at_stop(self._tokenizer, ids, request.stop)  # a stop string ends it, as a sampling backend does
            ids = cut if cut is not None and len(cut) <= request.max_new_tokens else (ids + [self.stop_id])[: request.max_new_tokens]
            stopped = cut is not None and ids == cut
            out.append(
                Generation(
                    completion_ids=ids,
                    logprobs=self.score(request.prompt_ids, ids, request.temperature),
                    text=self._tokenizer.decode(ids, skip_special_tokens=True),
                    finish_reason="stop" if stopped or ids[-1] == self.stop_id else "length",
                    policy_version=self.policy_version,
                )
            )
        return out
