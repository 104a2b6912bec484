"""Where chance is: two scripted players for a probe of games (`eval --backend copy` / `--backend random`).

    backend = ChanceBackend(model_path, "copy")     # only the model's tokenizer is loaded
    backend.generate([request])                    # each reply: one action for the last observation in the prompt

- copy: the first example the last observation prints in a box (`Answer as \\boxed{e}`): what a model that
  copies the format example plays. The seed games draw the example independently of the answer
  (tests/engine/protocol/test_seed_examples.py), so this is chance play in the model's own habit.
- random: uniform over the choices the observation lists (`choices`): an `Options:` list, a `(a/b/c)` list, a
  `verb X` example expanded over the alternatives the text enumerates (`A, B or C`, an `Items:` list, `1-4`, so a
  bare-number example beside `x is 1-9` too); where it lists none, the examples it shows. Drawn with a generator
  seeded by the run seed and the prompt, so the same episode plays the same way again.

The last observation is the prompt's text after the chat template's last user-turn header (found by rendering a
dummy conversation, so any family's template works). A reply continues the prompt: `X}` after a prompt that ends
with the prefilled `\\boxed{`, else `\\boxed{X}`; it ends with the template's stop token. Log-probs are 0: these
players are never trained, only scored beside the models (bin/bench learning's copy-bot and random rows).
"""

from __future__ import annotations

import hashlib
import random
import re

from actors.evaluation.replying import ReplyingBackend

KINDS = ("copy", "random")
BOX_OPEN = "\\boxed{"
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_OPTIONS_LIST = re.compile(r"Options:\s*\[([^\]]*)\]")
_OPTIONS_TEXT = re.compile(r"Options:\s*([^.?\n\[]+)")
_SLASHES = re.compile(r"\(([\w ]+(?:/[\w ]+)+)\)")
_ENUMERATION = re.compile(r"\b(\w+(?:, \w+)*,? or \w+)\b")
_RANGE = re.compile(r"\b(\d+)-(\d+)\b")
_ITEMS = re.compile(r"Items:\s*([^.]+)\.")
_PLACEHOLDER = "Q7Z"


def examples(observation: str) -> list[str]:
    """The non-empty boxed examples an observation prints, in order."""
    return [e.strip() for e in _BOXED.findall(observation) if e.strip()]


def _split(text: str) -> list[str]:
    return [p.strip().strip("'\"") for p in re.split(r",\s*|\s+or\s+", text) if p.strip().strip("'\"")]


def _alternatives(observation: str, value: str) -> list[str]:
    """The enumeration in `observation` that `value` belongs to (`A, B or C`, an `Items:` list's names, a range
    `1-4`); [] when none."""
    for match in _ITEMS.finditer(observation):
        names = [entry.split()[0] for entry in _split(match.group(1)) if entry.split()]
        if value in names:
            return names
    for match in _ENUMERATION.finditer(observation):
        items = _split(match.group(1))
        if value in items and len(items) > 1:
            return items
    if value.isdigit() and str(int(value)) == value:  # a number, not a bit string such as 0101
        for low, high in _RANGE.findall(observation):
            if int(low) <= int(value) <= int(high) and int(high) - int(low) <= 50:
                return [str(n) for n in range(int(low), int(high) + 1)]
    return []


def choices(observation: str) -> list[str]:
    """The actions an observation offers (see the module's doc), each once, in order."""
    found: list[str] = []
    listed = _OPTIONS_LIST.search(observation) or _OPTIONS_TEXT.search(observation)
    if listed:
        found += _split(listed.group(1))
    for match in _SLASHES.finditer(observation):
        found += [p.strip() for p in match.group(1).split("/") if p.strip()]
    for example in examples(observation):
        verb, _, value = example.rpartition(" ")
        spread = _alternatives(observation, value)
        found += [f"{verb} {v}".strip() for v in spread] if spread else [example]
    return list(dict.fromkeys(found))


def user_header(tokenizer) -> str:
    """The text the chat template puts before a user message's content (after an assistant turn)."""
    def render(messages):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)

    first = render([{"role": "user", "content": _PLACEHOLDER + "1"}])
    later = render([{"role": "user", "content": _PLACEHOLDER + "1"}, {"role": "assistant", "content": _PLACEHOLDER + "2"},
                    {"role": "user", "content": _PLACEHOLDER + "3"}])
    between = later[later.index(_PLACEHOLDER + "2") + 4: later.index(_PLACEHOLDER + "3")]
    before = first[: first.index(_PLACEHOLDER + "1")]
    n = 0
    while n < min(len(between), len(before)) and between[-1 - n] == before[-1 - n]:
        n += 1
    return between[len(between) - n:]


class ChanceBackend(ReplyingBackend):
    def __init__(self, model_path: str, kind: str, *, seed: int = 0):
        if kind not in KINDS:
            raise ValueError(f"a chance player is one of {', '.join(KINDS)} (got {kind!r})")
        super().__init__(model_path)
        self.name, self.seed = kind, seed
        self.header = user_header(self._tokenizer)

    def action(self, prompt: str) -> str:
        observation = prompt.rsplit(self.header, 1)[-1] if self.header else prompt
        if self.name == "copy":
            shown = examples(observation)
            return shown[0] if shown else ""
        offered = choices(observation)
        digest = hashlib.sha256(f"{self.seed}:{prompt}".encode()).digest()
        return random.Random(digest).choice(offered) if offered else ""

    def reply(self, prompt: str) -> str:
        action = self.action(prompt)
        return f"{action}}}" if prompt.rstrip().endswith(BOX_OPEN) else f"\\boxed{{{action}}}"
