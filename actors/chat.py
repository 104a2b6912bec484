"""Multi-turn chat contexts built token by token ("token in, token out"), for any chat template.

The sampled completion tokens are kept exactly as sampled (loss mask 1, with their behaviour log-probs and
policy version), thinking included; only the text the chat template puts around them is tokenized (loss mask 0):

- the first prompt: the template's rendering of the first message(s) with the generation prompt (a system
  message is rendered however the family renders it: Llama 3.x's date header, Gemma's first-user prefix; a
  template that refuses a system role gets it folded into the first user message);
- after an assistant reply: the template's end-of-turn text (for ChatML `<|im_end|>\\n`), less the stop token the
  model already sampled (finish_reason "stop"); a reply cut off at the token limit gets the whole end-of-turn;
- each later user (or tool) turn: a DELTA, the template's rendering of just that turn and the generation prompt.

The conversation is never re-rendered: templates such as Qwen3's hybrid one render earlier turns differently once
a turn is added (they drop the think block of replies before the last user query), so a re-rendered history is
not what the model saw. The end-of-turn and the deltas come from rendering a fixed dummy conversation, with and
without the new turn, and taking what the new turn added (`turn_delta`).

    chat = ChatContext(tokenizer, system="...", template_kwargs={"enable_thinking": False})
    chat.add_user("Observation: ...")
    generation = await batcher.generate(GenerationRequest(prompt_ids=chat.ids, ...))
    chat.add_assistant(generation)

Template arguments (`model.chat_template_kwargs`, engine/protocol/config.py) reach every render, either given to
ChatContext or carried by the tokenizer `with_chat_template_kwargs` wraps (how the worker and the evaluation pass
them to every actor without threading them through each call).
"""

from __future__ import annotations

from actors.inference.base import Generation, GenerationRequest, RequestRole
from engine.protocol.messages import Arm, Role, Sample
from engine.protocol.messages import pack_floats, pack_ints, pack_mask

# The dummy conversation the deltas are cut from: plain words no template rewrites (no think block, no tool call).
_DUMMY_SYSTEM = "You are a dummy system prompt."
_DUMMY_USER = "This is a dummy user message."
_DUMMY_REPLY = "This is a dummy assistant reply."


class TemplateError(ValueError):
    """The chat template cannot render a turn the way token-in/token-out play needs."""


class TemplateArgsTokenizer:
    """A tokenizer whose `apply_chat_template` always gets the run's template arguments (`model.chat_template_kwargs`);
    everything else is the wrapped tokenizer's."""

    def __init__(self, tokenizer, chat_template_kwargs: dict):
        self.wrapped = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs)

    def apply_chat_template(self, messages, **kwargs):
        return self.wrapped.apply_chat_template(messages, **{**self.chat_template_kwargs, **kwargs})

    def __call__(self, *args, **kwargs):
        return self.wrapped(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.wrapped, name)


def with_chat_template_kwargs(tokenizer, chat_template_kwargs: dict | None):
    """`tokenizer` itself when there are no template arguments, else a wrapper that passes them to every render."""
    return TemplateArgsTokenizer(tokenizer, chat_template_kwargs) if chat_template_kwargs else tokenizer


class ChatContext:
    def __init__(self, tokenizer, system: str | None = None, *, template_kwargs: dict | None = None,
                 tools: list[dict] | None = None):
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self.tools = tools or None  # given to the template as `tools=` (ToolChat, where the template renders them)
        self.system = system or None
        self.messages: list[dict] = [{"role": "system", "content": system}] if system else []
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self._prefill = ""
        self._fold_system = False  # the template refuses a system role: the system goes into the first user message
        self._end_of_turn: str | None = None
        self.reply_end = 0  # where the last sampled reply ends in `ids` (its end-of-turn text follows)

    # -- rendering ---------------------------------------------------------------------------------------------

    def render(self, messages: list[dict], generation_prompt: bool) -> str:
        """The template's text for `messages`, with this context's tools and template arguments."""
        extra = dict(self.template_kwargs)
        if self.tools:
            extra["tools"] = self.tools
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt, **extra)

    def _dummy_head(self) -> list[dict]:
        """The dummy conversation before a new turn: (system,) user, assistant reply."""
        head = [{"role": "system", "content": _DUMMY_SYSTEM}] if self.system and not self._fold_system else []
        return head + [{"role": "user", "content": _DUMMY_USER}, {"role": "assistant", "content": _DUMMY_REPLY}]

    def end_of_turn(self) -> str:
        """The template's text after an assistant reply's content (ChatML: `<|im_end|>\\n`; Llama 3: `<|eot_id|>`)."""
        if self._end_of_turn is None:
            rendered = self.render(self._dummy_head(), generation_prompt=False)
            at = rendered.rfind(_DUMMY_REPLY)
            if at < 0:
                raise TemplateError("the chat template does not render an assistant reply's content as given")
            self._end_of_turn = rendered[at + len(_DUMMY_REPLY):]
        return self._end_of_turn

    def turn_delta(self, turn: list[dict]) -> str:
        """The template's text for the messages `turn` (user or tool) after an assistant reply, with the generation
        prompt: the dummy conversation rendered with the turn, from the end of the dummy reply's end-of-turn on."""
        end = _DUMMY_REPLY + self.end_of_turn()
        rendered = self.render(self._dummy_head() + turn, generation_prompt=True)
        at = rendered.find(end)
        if at < 0:
            raise TemplateError("the chat template renders an assistant reply differently once a turn follows it")
        return rendered[at + len(end):]

    def _first_prompt(self, message: dict) -> str:
        if self.system and not self._fold_system:
            try:
                return self.render([self.messages[0], message], generation_prompt=True)
            except Exception:  # noqa: BLE001 - a template without a system role (Gemma 2): fold it into the user turn
                self._fold_system, self._end_of_turn = True, None
        if self.system:
            message = {**message, "content": f"{self.system}\n\n{message['content']}"}
        return self.render([message], generation_prompt=True)

    # -- the token record ----------------------------------------------------------------------------------------

    def _append_text(self, text: str) -> None:
        if text:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            self.ids += ids
            self.mask += [0] * len(ids)
            self.logprobs += [0.0] * len(ids)
            self.versions += [-1] * len(ids)

    def _add_turn(self, turn: list[dict], prefill: str) -> None:
        started = any(m["role"] == "assistant" for m in self.messages)
        if not started and len(turn) == 1 and turn[0]["role"] == "user":
            text = self._first_prompt(turn[0])
        elif not started:
            text = self.render(self.messages + turn, generation_prompt=True)
        else:
            text = self.turn_delta(turn)
        self.messages += turn
        self._append_text(text + prefill)
        self._prefill = prefill

    def add_user(self, content: str, role: str = "user", prefill: str = "") -> None:
        """Append a user (or other role's) message and the generation prompt, plus an optional assistant prefill."""
        self._add_turn([{"role": role, "content": content}], prefill)

    def add_assistant(self, generation: Generation) -> None:
        """Append the sampled reply as sampled, then the template's end-of-turn (masked)."""
        self.ids += generation.completion_ids
        self.mask += [1] * len(generation.completion_ids)
        self.logprobs += list(generation.logprobs)
        self.versions += [generation.policy_version] * len(generation.completion_ids)
        self.reply_end = len(self.ids)
        self.messages.append({"role": "assistant", "content": self._prefill + generation.text})
        end = self.end_of_turn()
        if generation.finish_reason == "stop" and generation.completion_ids:
            stop_text = self.tokenizer.convert_ids_to_tokens(generation.completion_ids[-1])
            if stop_text and end.startswith(stop_text):
                end = end[len(stop_text):]  # the model sampled the end-of-turn token itself
        self._append_text(end)
        self._prefill = ""

    def request(self, role: RequestRole, *, max_new_tokens: int, temperature: float, play_config, stop: tuple[str, ...] = ()) -> GenerationRequest:
        """A generation request continuing this context, with the run's top-p / top-k (and `stop` strings)."""
        return GenerationRequest(
            prompt_ids=list(self.ids), max_new_tokens=max_new_tokens, temperature=temperature,
            top_p=play_config.top_p, top_k=play_config.top_k, role=role, stop=tuple(stop),
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
