"""A chat context with tools: the specs go through the chat template's `tools=` where the template renders them
(Qwen3's does), else into the system message as text (SmolLM2's and the test tokenizer's ignore `tools`); tool
results come back as `tool`-role messages, every result of one reply in one go (so the rendering stays a prefix
of the next turn's)."""

from __future__ import annotations

import json

from actors.chat import ChatContext
from actors.tool_use.parsing import CANONICAL

TOOLS_HEADER = ("You may call the following tools. To call one, reply with\n" + CANONICAL +
                "\nYou may make several calls in one reply. Tool results come back as tool messages. "
                "When every instruction is complete, reply with the final answer as <answer>...</answer>.\n\nTools:")


def tools_as_text(tools: list[dict]) -> str:
    return TOOLS_HEADER + "\n" + "\n".join(json.dumps(t["function"], sort_keys=False) for t in tools)


def template_renders_tools(tokenizer, tools: list[dict]) -> bool:
    probe = [{"role": "user", "content": "x"}]
    try:
        plain = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
        with_tools = tokenizer.apply_chat_template(probe, tools=tools, tokenize=False, add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - a template (or tokenizer) that takes no tools
        return False
    return with_tools != plain and tools[0]["function"]["name"] in with_tools


class ToolChat(ChatContext):
    def __init__(self, tokenizer, tools: list[dict], system: str | None = None):
        self.tools = tools
        self.native = bool(tools) and template_renders_tools(tokenizer, tools)
        if not self.native and tools:
            system = f"{system}\n\n{tools_as_text(tools)}" if system else tools_as_text(tools)
        super().__init__(tokenizer, system=system)
        self.tool_role = "tool"

    def _render(self, generation_prompt: bool) -> str:
        extra = {"tools": self.tools} if self.native else {}
        rendered = self.tokenizer.apply_chat_template(self.messages, tokenize=False, add_generation_prompt=generation_prompt, **extra)
        if not rendered.startswith(self._rendered):
            raise ValueError("the chat template renders earlier turns differently once a turn is added; "
                             "token-in/token-out multi-turn play needs a prefix-stable template (ChatML is)")
        return rendered

    def add_tool_results(self, results: list[tuple[str, str]]) -> None:
        """Append one tool message per (tool name, result) and the generation prompt."""
        before = len(self.messages)
        self.messages += [{"role": self.tool_role, "name": name, "content": text} for name, text in results]
        try:
            rendered = self._render(generation_prompt=True)
        except Exception:  # noqa: BLE001 - a template without a tool role: the results as a user message
            del self.messages[before:]
            self.tool_role = "user"
            self.messages.append({"role": "user", "content": "\n".join(f"<tool_response>\n{t}\n</tool_response>" for _, t in results)})
            rendered = self._render(generation_prompt=True)
        self._append_text(rendered[len(self._rendered):])
        self._rendered = rendered
        self._prefill = ""

    def mask_last(self, count: int) -> None:
        """Take the last `count` sampled tokens out of training (a malformed tool call, with the config's switch)."""
        if count:
            self.mask[-count:] = [0] * count
            self.logprobs[-count:] = [0.0] * count
            self.versions[-count:] = [-1] * count
