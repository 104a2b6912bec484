"""Multi-turn chat contexts built token by token ("token in, token out").

The sampled completion tokens are kept exactly as sampled (loss mask 1, with their behaviour log-probs and
policy version); only the text the chat template puts between turns is tokenized (loss mask 0). The template's
text after an assistant reply (for ChatML: `<|im_end|>\\n`) is found by rendering the conversation, minus the
stop token the model already produced.

    chat = ChatContext(tokenizer)
    chat.add_user("Observation: ...")
    generation = await batcher.generate(GenerationRequest(prompt_ids=chat.ids, ...))
    chat.add_assistant(generation)
"""

from __future__ import annotations

from actors.inference.base import Generation, GenerationRequest, RequestRole
from engine.protocol.messages import Arm, Role, Sample
from engine.protocol.messages import pack_floats, pack_ints, pack_mask


class ChatContext:
    def __init__(self, tokenizer, system: str | None = None):
        self.tokenizer = tokenizer
        self.messages: list[dict] = [{"role": "system", "content": system}] if system else []
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self._rendered = ""  # the template text that self.ids stand for
        self._prefill = ""

    def _render(self, generation_prompt: bool) -> str:
        rendered = self.tokenizer.apply_chat_template(
            self.messages, tokenize=False, add_generation_prompt=generation_prompt
        )
        if not rendered.startswith(self._rendered):
            raise ValueError(
                "the chat template renders earlier turns differently once a turn is added; "
                "token-in/token-out multi-turn play needs a prefix-stable template (ChatML is)"
            )
        return rendered

    def _append_text(self, text: str) -> None:
        if text:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            self.ids += ids
            self.mask += [0] * len(ids)
            self.logprobs += [0.0] * len(ids)
            self.versions += [-1] * len(ids)

    def add_user(self, content: str, role: str = "user", prefill: str = "") -> None:
        """Append a user (or tool) message and the generation prompt, plus an optional assistant prefill."""
        self.messages.append({"role": role, "content": content})
        rendered = self._render(generation_prompt=True)
        self._append_text(rendered[len(self._rendered) :] + prefill)
        self._rendered = rendered
        self._prefill = prefill

    def add_assistant(self, generation: Generation) -> None:
        content = self._prefill + generation.text
        self.ids += generation.completion_ids
        self.mask += [1] * len(generation.completion_ids)
        self.logprobs += list(generation.logprobs)
        self.versions += [generation.policy_version] * len(generation.completion_ids)
        before = self._rendered
        self.messages.append({"role": "assistant", "content": content})
        part = self._render(generation_prompt=False)[len(before) :]
        stripped = content.strip()
        end = part.rfind(stripped) + len(stripped) if stripped and stripped in part else 0
        text = part[:end]
        if generation.finish_reason == "stop" and generation.completion_ids:
            stop_text = self.tokenizer.convert_ids_to_tokens(generation.completion_ids[-1])
            if part[end:].startswith(stop_text):
                text += stop_text  # the model sampled the end-of-turn token itself
        self._rendered = before + text
        self._prefill = ""

    def request(self, role: RequestRole, *, max_new_tokens: int, temperature: float, play_config) -> GenerationRequest:
        """A generation request continuing this context, with the run's top-p / top-k."""
        return GenerationRequest(
            prompt_ids=list(self.ids), max_new_tokens=max_new_tokens, temperature=temperature,
            top_p=play_config.top_p, top_k=play_config.top_k, role=role,
        )

    def sample(self, *, sample_id: str, role: Role, env_id: str, skill: str, arm: Arm, step: int, reward: float, temperature: float) -> Sample:
        """The context as a training sample (its reward and advantage are set later for the designer)."""
        return Sample(
            sample_id=sample_id, role=role, env_id=env_id, skill=skill, arm=arm, step=step,
            tokens=pack_ints(self.ids), loss_mask=pack_mask(self.mask), logprobs=pack_floats(self.logprobs),
            versions=pack_ints(self.versions), reward=reward, temperature=temperature,
        )

    def __len__(self) -> int:
        return len(self.ids)
