"""An eval-only scripted answerer (`eval --backend oracle`): it replies with each item's own reference answer.

    backend = OracleBackend(model_path)        # only the model's tokenizer is loaded
    backend.expect(question, "<answer>42</answer>")
    backend.generate([request])                # the reply registered for the question found in the prompt

For tests and for checking a suite end to end: a correct answerer must win every item whose reference answer its
scorer accepts, so the suite's prompts, parsing and scoring are checked against hand-computed results without a
model. A prompt that holds no registered question gets a reply without any answer (a malformed reply).
"""

from __future__ import annotations

from actors.evaluation.replying import ReplyingBackend

UNKNOWN = "I do not know."


class OracleBackend(ReplyingBackend):
    name = "oracle"

    def __init__(self, model_path: str, *, seed: int = 0):
        del seed
        super().__init__(model_path)
        self.replies: dict[str, str] = {}

    def expect(self, question: str, reply: str) -> None:
        self.replies[question] = reply

    def reply_for(self, prompt: str) -> str:
        """The reply of the longest registered question the prompt holds (questions can contain each other)."""
        found = [q for q in self.replies if q and q in prompt]
        return self.replies[max(found, key=len)] if found else UNKNOWN

    def reply(self, prompt: str) -> str:
        return self.reply_for(prompt)
