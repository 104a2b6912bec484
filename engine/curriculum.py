"""What the designer is asked for: skills, their rotation, the corpus, and the seed environments.

- `active_skills(skills, per_refresh, refresh_index)`: deterministic round-robin, as the reference
  (epoch e uses skills[(e * n) mod len ...]).
- `load_corpus(path)`: JSONL with a `text` or `orig_doc` field, or a folder of `.txt` files; the shipped
  default is engine/protocol/data/corpus.jsonl (`DEFAULT_CORPUS`, engine/protocol/paths.py).
- `load_seeds()`: the hand-written environments in engine/protocol/data/seeds/ (`SEEDS_DIR`) with their hints: three levels a skill (easy
  ones a 135M model sometimes wins, so that groups of plays have variance from the first step; medium; hard).
- `load_environment_folder(folder)`: a fixed pool of any size (`curriculum.fixed_envs`): every `.py` file, with
  skill and hint from `manifest.json` where it lists the file; `pool_draw(...)` samples it without replacement
  across refreshes (the reference's static pool), a new shuffled pass once it is used up.
- `seed_record(env_id, skill, code, hint)`: how an environment no designer wrote (a seed, a fixed-pool game, an
  RLVE task) is stored: valid, source "seed".
- `ActiveEnv`, `RefreshResult`: an environment played this step, and what a refresh returns (the designers' in
  engine/refresh.py, RLVE's in engine/rlve.py).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import msgspec

from engine.protocol.contract import env_class_name
from engine.protocol.errors import InputError
from engine.protocol.paths import DEFAULT_CORPUS, SEEDS_DIR
from storage.records import EnvironmentRecord

SKILL_DESCRIPTIONS = {
    "Mathematical Reasoning": "solving mathematical problems and equations",
    "Logical Deduction": "drawing conclusions from premises and rules",
    "Spatial Reasoning": "reasoning about spatial relationships, positions and movement",
    "Pattern Recognition": "finding patterns in sequences, numbers or text",
    "Optimization": "finding optimal solutions under constraints",
    "Causal Inference": "discovering cause-effect relationships by intervention",
}
TOOL_USE_SKILL_DESCRIPTIONS = {  # the tool-use setting's skills (spade-reference.md §1)
    "API Orchestration": "calling several APIs in the right order, feeding one's output into the next",
    "Data Retrieval": "looking up the facts an instruction needs before acting on them",
    "State Modification": "changing a backend's state exactly as instructed",
    "Error Recovery": "noticing a failed or refused call and correcting it",
    "Tool Selection": "choosing the right tool among distractors, and declining what no tool serves",
    "Multi-Step Workflows": "carrying a task through several dependent steps",
}


class CorpusError(InputError, ValueError):
    """The corpus file or folder cannot be used; the message says why."""


class SeedsError(InputError, ValueError):
    """The seed environments folder cannot be used; the message names the entry and what is wrong."""


class Passage(msgspec.Struct, frozen=True):
    passage_id: str
    text: str


class SeedEnvironment(msgspec.Struct, frozen=True):
    name: str
    skill: str
    code: str
    hint: str
    level: str = ""  # easy | medium | hard (manifest.json's optional `level`); "" when not given


SEED_LEVELS = ("easy", "medium", "hard")


def skill_description(skill: str) -> str:
    return SKILL_DESCRIPTIONS.get(skill) or TOOL_USE_SKILL_DESCRIPTIONS.get(skill, skill.lower())


def active_skills(skills: list[str], per_refresh: int, refresh_index: int) -> list[str]:
    start = (refresh_index * per_refresh) % len(skills)
    return [skills[(start + i) % len(skills)] for i in range(per_refresh)]


def slot_skills(active: list[str], slots: int) -> list[str]:
    return [active[i % len(active)] for i in range(slots)]


def load_corpus(path: str | Path | None = None) -> list[Passage]:
    path = Path(path) if path else DEFAULT_CORPUS
    if not path.exists():
        raise CorpusError(f"corpus {path} does not exist (give a JSONL file or a folder of .txt files)")
    passages: list[Passage] = []
    if path.is_dir():
        for file in sorted(path.glob("*.txt")):
            text = file.read_text(errors="replace").strip()
            if text:
                passages.append(Passage(file.stem, text))
    else:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"corpus {path} line {number} is not JSON: {exc.msg}") from None
            text = row.get("orig_doc") or row.get("text") if isinstance(row, dict) else None
            if not isinstance(text, str) or not text.strip():
                raise CorpusError(f"corpus {path} line {number} has no `text` or `orig_doc` string field")
            passages.append(Passage(str(row.get("id", f"line{number}")), text.strip()))
    if not passages:
        raise CorpusError(f"corpus {path} holds no passages")
    return passages


def truncate_words(text: str, max_words: int) -> str:
    words = text.split()
    if len(words) <= max_words:
        return text
    return " ".join(words[:max_words]) + f"\n[Document truncated at ~{max_words} words]"


class PassageSampler:
    """Uniform sampling without replacement until the corpus is used up, then a new shuffled pass."""

    def __init__(self, passages: list[Passage], seed: int):
        self._passages = passages
        self._rng = random.Random(seed)
        self._order: list[int] = []

    def reseed(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._order = []

    def sample(self) -> Passage:
        if not self._order:
            self._order = list(range(len(self._passages)))
            self._rng.shuffle(self._order)
        return self._passages[self._order.pop()]


def load_environment_folder(folder: Path) -> list[SeedEnvironment]:
    """Every `*.py` in `folder` as a fixed environment; `manifest.json`, if there, gives skills and hints (an
    environment it does not list takes its slot's skill and has no hint)."""
    if not folder.is_dir():
        raise SeedsError(f"curriculum.fixed_envs: {folder} is not a folder of environment .py files")
    listed = {Path(s.name).stem: s for s in load_seeds(folder)} if (folder / "manifest.json").exists() else {}
    envs = [listed.get(path.stem) or SeedEnvironment(name=path.stem, skill="", code=path.read_text(), hint="")
            for path in sorted(folder.glob("*.py"))]
    if not envs:
        raise SeedsError(f"curriculum.fixed_envs: {folder} holds no .py environments")
    return envs


def pool_draw(size: int, count: int, refresh_index: int, seed: int) -> list[int]:
    """The pool indices refresh `refresh_index` plays (at most `size`): shuffled passes over the pool (pass p
    shuffled by `seed` and p), each cut into size // count refreshes of distinct indices, so no index repeats within
    a pass (the size % count left over at a pass's end wait for a later pass)."""
    count = min(count, size)
    number, within = divmod(refresh_index, size // count)
    order = list(range(size))
    random.Random(f"pool:{seed}:{number}").shuffle(order)
    return order[within * count:(within + 1) * count]


def load_seeds(folder: Path = SEEDS_DIR) -> list[SeedEnvironment]:
    """The seed environments listed in `folder/manifest.json`: a JSON list of {file, skill, hint[, level]}."""
    manifest_path = folder / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        raise SeedsError(f"curriculum.seeds: {folder} has no manifest.json (a JSON list of {{file, skill, hint}})") from None
    except json.JSONDecodeError as exc:
        raise SeedsError(f"curriculum.seeds: {manifest_path} is not JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(manifest, list):
        raise SeedsError(f"curriculum.seeds: {manifest_path} must be a JSON list of {{file, skill, hint}} objects")
    seeds = []
    for index, item in enumerate(manifest):
        where = f"curriculum.seeds: {manifest_path} entry {index}"
        if not isinstance(item, dict) or not all(isinstance(item.get(key), str) and item[key].strip() for key in ("file", "skill", "hint")):
            raise SeedsError(f"{where} needs non-empty string fields file, skill and hint")
        path = folder / item["file"]
        if not path.is_file():
            raise SeedsError(f"{where} names {path}, which does not exist")
        level = item.get("level", "")
        if level not in ("", *SEED_LEVELS):
            raise SeedsError(f"{where} has level {level!r}: give one of {', '.join(SEED_LEVELS)}, or leave it out")
        seeds.append(SeedEnvironment(name=path.stem, skill=item["skill"], code=path.read_text(), hint=item["hint"], level=level))
    return seeds


def seed_record(env_id: str, skill: str, code: str, hint: str, *, step: int = -1, setting: str = "games") -> EnvironmentRecord:
    """The stored record of an environment no designer wrote: valid from the start, with no design behind it."""
    return EnvironmentRecord(
        env_id=env_id, skill=skill, step_created=step, source="seed", passage_id="", attempt=0, code=code, reply="",
        hint=hint, valid=True, reason="", checks=[], designer_sample_id="", worker_id="", created_at=time.time(), setting=setting,
    )


class ActiveEnv(msgspec.Struct, kw_only=True):
    """An environment played in the current refresh epoch."""

    env_id: str
    skill: str
    code: str
    hint: str
    designed_now: bool  # made at this refresh (so it earns a designer reward)
    class_name: str

    @classmethod
    def of(cls, record: EnvironmentRecord, *, designed_now: bool) -> ActiveEnv:
        """The stored environment `record` as played now."""
        return cls(
            env_id=record.env_id, skill=record.skill, code=record.code, hint=record.hint, designed_now=designed_now,
            class_name=env_class_name(record.code),
        )


class RefreshResult(msgspec.Struct, kw_only=True):
    active: list[ActiveEnv]
    requested: int  # design tasks sent (all attempts)
    valid: int  # slots filled by a valid design made now
    tokens: int  # tokens the designs generated
    edits_requested: int = 0  # of `requested`, the edit tasks (a variant of a remembered environment)
    edits_valid: int = 0  # of `valid`, the slots filled by a valid edit
    duplicates: int = 0  # edits rejected because they reproduce an environment in memory
    edit_replies: int = 0  # the edit tasks' replies (a number edit that copied its parent drew again: play.edit_draws)
    # wall seconds by part of the refresh (engine/metrics/phases.py design_round_split, and "revalidation")
    phase_seconds: dict[str, float] = msgspec.field(default_factory=dict)
