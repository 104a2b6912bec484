"""A stored trajectory as text: its token ids decoded with the run's tokenizer, cut where the loss mask changes.

    tokenizer = load_tokenizer(paths.read_model_path())      # tokenizers.Tokenizer from tokenizer.json, or None
    for part in decode_parts(record.sample, tokenizer): ...  # Part(kind="context" | "model", text, versions)
    first_observation(prompt_text)                           # what reset() said, out of the agent's first prompt

Only the `tokenizers` package is used (the fast tokenizer's tokenizer.json), never transformers: the engine's
commands load no torch. Mask-0 runs are what the chat template and the environment put in the context (system and
user turns, observations); mask-1 runs are what the policy sampled, each with the policy versions that sampled it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.protocol.messages import Sample, unpack_ints, unpack_mask

# The agent's first turn wraps the observation (actors/prompts.py AGENT_FIRST_TURN and HINT_INJECTION): the text
# between this opening and the first of the closings is the observation reset() returned.
OBSERVATION_OPEN = "Observation: "
OBSERVATION_CLOSE = ("\n\nHINT: ", "\nPlease reason step by step", "\nReply with your action only")
_CHATML = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|\Z)", re.S)

_TOKENIZERS: dict[str, object] = {}


@dataclass(frozen=True)
class Part:
    kind: str  # "context" (loss mask 0) or "model" (sampled, loss mask 1)
    text: str
    versions: tuple[int, ...]  # the policy versions that sampled a model part; () for context


def load_tokenizer(model_path: str | Path | None):
    """The run's tokenizer (tokenizer.json in its model folder), or None when there is none to read."""
    if not model_path:
        return None
    file = Path(model_path) / "tokenizer.json"
    key = str(file)
    if key not in _TOKENIZERS:
        try:
            from tokenizers import Tokenizer

            _TOKENIZERS[key] = Tokenizer.from_file(key) if file.is_file() else None
        except Exception:  # no tokenizers package, or a tokenizer.json it cannot read: no decoding, not a failure
            _TOKENIZERS[key] = None
    return _TOKENIZERS[key]


def decode_parts(sample: Sample, tokenizer) -> list[Part]:
    """The sample cut into runs of equal loss mask, each decoded (special tokens kept: they mark the turns)."""
    ids = unpack_ints(sample.tokens)
    mask = unpack_mask(sample.loss_mask)
    versions = unpack_ints(sample.versions)
    parts, start = [], 0
    for end in range(1, len(ids) + 1):
        if end == len(ids) or mask[end] != mask[start]:
            chunk = ids[start:end].tolist()
            text = tokenizer.decode(chunk, skip_special_tokens=False)
            kind = "model" if mask[start] else "context"
            sampled = tuple(sorted(set(versions[start:end][versions[start:end] >= 0].tolist()))) if kind == "model" else ()
            parts.append(Part(kind, text, sampled))
            start = end
    return parts


def chat_turns(text: str) -> list[tuple[str, str]]:
    """(role, content) of the ChatML turns in `text` (the template of SmolLM2 and the tiny test model); text with
    no turn markers is one ("context", text) turn."""
    turns = [(m.group(1), m.group(2)) for m in _CHATML.finditer(text)]
    if turns:
        return turns
    stripped = text.strip()
    return [("context", stripped)] if stripped else []


def first_observation(prompt: str) -> str:
    """The observation inside the agent's first prompt, or "" when the prompt is not one of ours."""
    start = prompt.find(OBSERVATION_OPEN)
    if start < 0:
        return ""
    start += len(OBSERVATION_OPEN)
    ends = [i for i in (prompt.find(close, start) for close in OBSERVATION_CLOSE) if i >= 0]
    return prompt[start : min(ends)] if ends else prompt[start:]


def prompt_text(sample: Sample, tokenizer) -> str:
    """The sample's tokens up to the first sampled one, decoded: the first prompt."""
    mask = unpack_mask(sample.loss_mask)
    sampled = np.flatnonzero(mask)
    ids = unpack_ints(sample.tokens)[: int(sampled[0]) if sampled.size else None]
    return tokenizer.decode(ids.tolist(), skip_special_tokens=False)
