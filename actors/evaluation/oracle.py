"""An eval-only scripted answerer (`eval --backend oracle`): it replies with each item's own reference answer.

    backend = OracleBackend(model_path)        # only the model's tokenizer is loaded
    backend.expect(question, "<answer>42</answer>")
    backend.generate([request])                # the reply registered for the question found in the prompt

For tests and for checking a suite end to end: a correct answerer must win every item whose reference answer its
scorer accepts, so the suite's prompts, parsing and scoring are checked against hand-computed results without a
model. A prompt that holds no registered question gets a reply without any answer (a malformed reply).
"""

from __future__ import annotations

from actors.inference.base import Generation, GenerationRequest, InferenceBackend

UNKNOWN = "I do not know."


class OracleBackend(InferenceBackend):
    name = "oracle"

    def __init__(self, model_path: str, *, seed: int = 0):
        from actors.inference.hf import load_tokenizer, stop_token_ids

        del seed
        self._tokenizer = load_tokenizer(model_path)
        eos = self._tokenizer.eos_token_id
        stops = stop_token_ids(self._tokenizer)
        self.stop_id = eos if eos in stops else stops[0]
        self.replies: dict[str, str] = {}

    @property
    def tokenizer(self):
        return self._tokenizer

    def expect(self, question: str, reply: str) -> None:
        self.replies[question] = reply

    def reply_for(self, prompt: str) -> str:
        """The reply of the longest registered question the prompt holds (questions can contain each other)."""
        found = [q for q in self.replies if q and q in prompt]
        return self.replies[max(found, key=len)] if found else UNKNOWN

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        out = []
        for request in requests:
            prompt = self._tokenizer.decode(request.prompt_ids, skip_special_tokens=False)
            ids = self._tokenizer(self.reply_for(prompt), add_special_tokens=False)["input_ids"]
            ids = (ids + [self.stop_id])[: max(1, request.max_new_tokens)]
            out.append(Generation(
                completion_ids=ids, logprobs=[0.0] * len(ids), text=self._tokenizer.decode(ids, skip_special_tokens=True),
                finish_reason="stop" if ids[-1] == self.stop_id else "length", policy_version=self.policy_version,
            ))
        return out

    def load_weights(self, path: str, version: int) -> None:
        self.policy_version = version
