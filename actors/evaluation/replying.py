"""Eval-only backends that answer each prompt with a text of their own instead of sampling: the oracle
(actors/evaluation/oracle.py) and the chance players (actors/evaluation/chance.py).

    class Mine(ReplyingBackend):
        def reply(self, prompt: str) -> str: ...      # the prompt as text (special tokens kept)

Only the model's tokenizer is loaded. Each reply is tokenized, ended with the chat template's stop token and cut at
`max_new_tokens`; its log-probs are 0 (these replies are scored, never trained on).
"""

from __future__ import annotations

from actors.inference.base import Generation, GenerationRequest, InferenceBackend


class ReplyingBackend(InferenceBackend):
    def __init__(self, model_path: str):
        from actors.inference.hf import load_tokenizer, stop_token_ids

        self._tokenizer = load_tokenizer(model_path)
        eos = self._tokenizer.eos_token_id
        stops = stop_token_ids(self._tokenizer)
        self.stop_id = eos if eos in stops else stops[0]

    @property
    def tokenizer(self):
        return self._tokenizer

    def reply(self, prompt: str) -> str:
        raise NotImplementedError

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        out = []
        for request in requests:
            prompt = self._tokenizer.decode(request.prompt_ids, skip_special_tokens=False)
            ids = self._tokenizer(self.reply(prompt), add_special_tokens=False)["input_ids"]
            ids = (ids + [self.stop_id])[: max(1, request.max_new_tokens)]
            out.append(Generation(
                completion_ids=ids, logprobs=[0.0] * len(ids), text=self._tokenizer.decode(ids, skip_special_tokens=True),
                finish_reason="stop" if ids[-1] == self.stop_id else "length", policy_version=self.policy_version,
            ))
        return out

    def load_weights(self, path: str, version: int) -> None:
        self.policy_version = version
