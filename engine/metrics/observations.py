"""The first observation of a stored agent play, read without torch: the run's tokenizer (the `tokenizers`
package, from the model folder's tokenizer.json), a sample's first prompt as text, and the observation inside it.
The loop's curriculum signals read it (engine/metrics/curriculum_signals.py); the offline transcript commands
(engine/tools/transcript.py) too.

    tokenizer = load_tokenizer(paths.read_model_path())      # tokenizers.Tokenizer, or None
    first_observation(prompt_text(sample, tokenizer))         # what reset() said, out of the agent's first prompt
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.protocol.messages import Sample, unpack_ints, unpack_mask

# The agent's first turn wraps the observation (actors/prompts.py AGENT_FIRST_TURN and HINT_INJECTION): the text
# between this opening and the first of the closings is the observation reset() returned.
OBSERVATION_OPEN = "Observation: "
OBSERVATION_CLOSE = ("\n\nHINT: ", "\nPlease reason step by step", "\nReply with your action only")

_TOKENIZERS: dict[str, object] = {}


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
