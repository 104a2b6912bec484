"""Tool calls and the final answer in an agent reply (spade-reference.md §8).

`parse_reply(text) -> ParsedReply`: an `<answer>...</answer>` wins (the episode's final answer); else every
`<tool_call>...</tool_call>` block, in order, in either form:
- JSON: `{"name": "f", "arguments": {...}}` (or `"parameters"`; arguments given as a JSON string are decoded);
- XML parameters: `<function=f><parameter=k>v</parameter>...</function>`, each value html-unescaped and decoded
  as JSON when it parses (so `3` is an int, `["a"]` a list), else kept as text.
A block that parses in neither form makes the reply `malformed` (the reference's format error). A trailing
`<|im_end|>` and anything before a closing `</think>` are ignored; a reply whose think block is never closed has
neither answer nor calls.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field

from actors.parsing import after_thinking

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([^>\s]+)\s*>(.*?)(?:</function>|$)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\s]+)\s*>(.*?)</parameter>", re.DOTALL)
CANONICAL = ('<tool_call>\n{"name": "TOOL_NAME", "arguments": {"PARAMETER": "VALUE"}}\n</tool_call>')
REMINDER = f"Your last tool call could not be parsed. Call a tool exactly like this:\n{CANONICAL}"


def action_stops(play_config) -> tuple[str, ...]:
    """Where a tool-use reply ends with `play.stop_at_action`: at its final answer or its first complete tool call
    (so a turn makes one call and sees its result before the next)."""
    return ("</answer>", "</tool_call>") if getattr(play_config, "stop_at_action", False) else ()


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict


@dataclass(frozen=True)
class ParsedReply:
    answer: str | None = None  # the final answer's text, when the reply gives one
    calls: list[ToolCall] = field(default_factory=list)
    malformed: int = 0  # <tool_call> blocks that parsed in neither form


def _value(text: str):
    text = html.unescape(text.strip())
    try:
        return json.loads(text)
    except ValueError:
        return text


def _json_call(body: str) -> ToolCall | None:
    body = body.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    for candidate in (body, html.unescape(body)):
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"].strip():
            return None
        arguments = data.get("arguments", data.get("parameters", {}))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                return None
        if arguments is None:
            arguments = {}
        return ToolCall(data["name"].strip(), arguments) if isinstance(arguments, dict) else None
    return None


def _xml_call(body: str) -> ToolCall | None:
    match = _FUNCTION.search(body)
    if not match:
        return None
    arguments = {key.strip(): _value(value) for key, value in _PARAMETER.findall(match.group(2))}
    return ToolCall(match.group(1).strip(), arguments)


def visible(text: str) -> str:
    """The part of a reply that counts: after the last `</think>` ("" when a think block is never closed), without a
    trailing `<|im_end|>`."""
    text = after_thinking(text).strip()
    while text.endswith("<|im_end|>"):
        text = text[: -len("<|im_end|>")].rstrip()
    return text


def parse_reply(text: str) -> ParsedReply:
    text = visible(text)
    answers = _ANSWER.findall(text)
    if answers:
        return ParsedReply(answer=answers[-1].strip())
    calls, malformed = [], 0
    for body in _BLOCK.findall(text):
        call = _xml_call(body) if "<function=" in body else _json_call(body)
        if call is None:
            malformed += 1
        else:
            calls.append(call)
    return ParsedReply(calls=calls, malformed=malformed)


def tool_specs(tools: dict | None) -> list[dict]:
    """The environment's `_tools` as OpenAI function specs (what chat templates take as `tools=`)."""
    specs = []
    for name, spec in (tools or {}).items():
        spec = spec if isinstance(spec, dict) else {}
        specs.append({"type": "function", "function": {"name": name, "description": str(spec.get("description", "")),
                                                       "parameters": spec.get("parameters", {})}})
    return specs
