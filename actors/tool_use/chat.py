"""A chat context with tools: the specs go through the chat template's `tools=` where the template renders them
(Qwen's, Llama 3.x's do), else into the system message as text (SmolLM2's, Gemma's and the test tokenizer's
ignore `tools`); tool results come back as the template's `tool`-role messages, every result of one reply in one
turn (actors/chat.py renders that turn as a delta). A template without a tool role (Gemma's alternate user and
model only) gets the results as one user message of `<tool_response>` blocks instead."""

from __future__ import annotations

import json

from actors.chat import ChatContext
from actors.tool_use.parsing import CANONICAL

TOOLS_HEADER = ("You may call the following tools. To call one, reply with\n" + CANONICAL +
                "\nYou may make several calls in one reply. Tool results come back as tool messages. "
                "When every instruction is complete, reply with the final answer as <answer>...</answer>.\n\nTools:")


def tools_as_text(tools: list[dict]) -> str:
    return TOOLS_HEADER + "\n" + "\n".join(json.dumps(t["function"], sort_keys=False) for t in tools)


def template_renders_tools(tokenizer, tools: list[dict], template_kwargs: dict | None = None) -> bool:
    probe = [{"role": "user", "content": "x"}]
    extra = dict(template_kwargs or {})
    try:
        plain = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True, **extra)
        with_tools = tokenizer.apply_chat_template(probe, tools=tools, tokenize=False, add_generation_prompt=True, **extra)
    except Exception:  # noqa: BLE001 - a template (or tokenizer) that takes no tools
        return False
    return with_tools != plain and tools[0]["function"]["name"] in with_tools


class ToolChat(ChatContext):
    def __init__(self, tokenizer, tools: list[dict], system: str | None = None, *, template_kwargs: dict | None = None):
        native = bool(tools) and template_renders_tools(tokenizer, tools, template_kwargs)
        if not native and tools:
            system = f"{system}\n\n{tools_as_text(tools)}" if system else tools_as_text(tools)
        super().__init__(tokenizer, system=system, template_kwargs=template_kwargs, tools=tools if native else None)
        self.native = native
        self.tool_role = "tool"

    def add_tool_results(self, results: list[tuple[str, str]]) -> None:
        """Append one tool message per (tool name, result) and the generation prompt."""
        turn = [{"role": self.tool_role, "name": name, "content": text} for name, text in results]
        if self.tool_role == "tool":
            try:
                self.turn_delta(turn)
            except Exception:  # noqa: BLE001 - a template without a tool role: the results as a user message
                self.tool_role = "user"
        if self.tool_role == "user":
            turn = [{"role": "user", "content": "\n".join(f"<tool_response>\n{t}\n</tool_response>" for _, t in results)}]
        self._add_turn(turn, "")

    def mask_last(self, count: int) -> None:
        """Take the last `count` tokens of the last sampled reply out of training (a malformed tool call, with the
        config's switch); the reply's end-of-turn text after them is masked already."""
        start = max(0, self.reply_end - count)
        for i in range(start, self.reply_end):
            self.mask[i], self.logprobs[i], self.versions[i] = 0, 0.0, -1
