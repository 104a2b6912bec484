"""A stored trajectory as text: its token ids decoded with the run's tokenizer, cut where the loss mask changes.

    tokenizer = load_tokenizer(paths.read_model_path())      # engine/metrics/observations.py: tokenizers.Tokenizer, or None
    for part in decode_parts(record.sample, tokenizer): ...  # Part(kind="context" | "model", text, versions)

Only the `tokenizers` package is used (the fast tokenizer's tokenizer.json), never transformers: the engine's
commands load no torch. Mask-0 runs are what the chat template and the environment put in the context (system and
user turns, observations); mask-1 runs are what the policy sampled, each with the policy versions that sampled it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.protocol.messages import Sample, unpack_ints, unpack_mask

_CHATML = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|\Z)", re.S)


@dataclass(frozen=True)
class Part:
    kind: str  # "context" (loss mask 0) or "model" (sampled, loss mask 1)
    text: str
    versions: tuple[int, ...]  # the policy versions that sampled a model part; () for context


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


