"""Reducing model replies to what the environment and the engine need.

Each reads only the reply's answer, `after_thinking(reply)`: the text after the last `</think>` (a reply that opens a
think block and never closes it has none, so it gives no action, code or hint).

- `parse_action(reply) -> (action, rule)`: the reference's rule (the first `\\boxed{...}` without nested braces,
  else the brace-matched content of the last `\\boxed{`), then fallbacks small models need: `<answer>...</answer>`
  tags, a final "answer is ..." phrase, else the stripped reply. The action is re-wrapped as `\\boxed{X}`
  (the raw reply is passed as is when nothing matched, so the environment can answer with its format reminder).
- `extract_code(reply)`: the first ```python fenced block; an unclosed fence counts to the end; else the reply.
- `clean_hint(reply)`: plain text, or the "hint" field of a ```json block, cut to 100 words.
- `action_stops(play_config)`: the stop strings that end a game reply at its action (`play.stop_at_action`).
"""

from __future__ import annotations

import json
import re

_BOXED_FLAT = re.compile(r"\\boxed\{+([^{}]*?)\}+", re.DOTALL)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_ANSWER_PHRASE = re.compile(r"answer\s+is\s*:?\s*([^\n]+?)\s*\.?\s*$", re.IGNORECASE | re.MULTILINE)
_FENCED = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)\n?```", re.DOTALL)
_OPEN_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*)", re.DOTALL)


BOX_OPEN = "\\boxed{"


def action_stops(play_config) -> tuple[str, ...]:
    """Where a game reply ends with `play.stop_at_action`: at the `}` that closes the box the prefill opened, so
    the reply is the action and the deciding tokens carry the sample's weight. Only when `play.agent_prefill` ends
    with `\\boxed{` (the default's): a reply that reasons first may write braces before its box. An answer with
    nested braces (`\\boxed{\\frac{1}{2}}`) is cut at its first `}`; the games' actions are names and numbers."""
    if getattr(play_config, "stop_at_action", False) and play_config.agent_prefill.rstrip().endswith(BOX_OPEN):
        return ("}",)
    return ()


def after_thinking(reply: str) -> str:
    """The part of a reply that holds its answer: the text after the last `</think>`; "" for a reply whose think
    block is never closed (all of it is thinking); the whole reply when it does not think."""
    if "</think>" in reply:
        return reply.rsplit("</think>", 1)[1]
    if "<think>" in reply:
        return ""
    return reply


def _last_boxed_balanced(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def parse_action(reply: str) -> tuple[str, str]:
    reply = after_thinking(reply)
    match = _BOXED_FLAT.search(reply)
    if match:
        return f"\\boxed{{{match.group(1).strip()}}}", "boxed_first"
    inner = _last_boxed_balanced(reply)
    if inner is not None:
        return f"\\boxed{{{inner.strip()}}}", "boxed_last"
    tags = _ANSWER_TAG.findall(reply)
    if tags and tags[-1].strip():
        return f"\\boxed{{{tags[-1].strip()}}}", "answer_tag"
    phrases = _ANSWER_PHRASE.findall(reply)
    if phrases:
        return f"\\boxed{{{phrases[-1].strip()}}}", "answer_phrase"
    return reply.strip(), "raw"


def extract_code(reply: str) -> str:
    reply = after_thinking(reply)
    match = _FENCED.search(reply)
    if match:
        return match.group(1).strip("\n")
    match = _OPEN_FENCE.search(reply)
    if match:
        return match.group(1).strip("\n")
    return reply.strip()


def clean_hint(reply: str, max_words: int = 100) -> str:
    text = after_thinking(reply).strip()
    block = re.search(r"```json\s*\n(.*?)```", text, re.DOTALL)
    if block:
        try:
            value = json.loads(block.group(1))
            if isinstance(value, dict) and isinstance(value.get("hint"), str):
                text = value["hint"].strip()
        except json.JSONDecodeError:
            pass
    words = text.split()
    return " ".join(words[:max_words])
