"""The evaluation suites: what is played, with which settings, grouped into datasets and families.

    suite = load_suite("rg-hard", episodes=1, datasets=["chain_sum", "maze"])
    suite = load_suite("math", path="my_aime.jsonl")        # or science / code, a JSONL file of the user's
    suite = load_suite("envs", path="probe_envs/")          # a folder of environment .py files (manifest.json optional)

`rg-hard`: the 100 Reasoning-Gym "hard" configurations SPADE evaluates on (engine/protocol/data/reasoning_gym_hard.json,
a copy of the one in shared/data), with the paper's settings: 8 episodes per dataset (entries 0..7 of each dataset
made with seed 42), 2 turns, temperature 0.6, 8192 tokens a turn, answers in <answer></answer> tags, win = score >= 1;
rolled up into the four families math (31), algorithmic (36), cognition (24), logic (9).
The local suites default to the reference's settings of the benchmark each format stands for (math: AIME, 64
samples at temperature 1.0; science: GPQA-Diamond, 8 at 0.7; code: LiveCodeBench, 1 at 0.2); `--episodes`,
`--temperature` and `--max-tokens` reduce them. The shipped example files (data/*_example.jsonl) are for tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from actors.evaluation import scoring
from engine.protocol.errors import InputError
from engine.protocol.messages import ReasoningGymTask
from engine.protocol.paths import RG_HARD_FILE

DATA = Path(__file__).resolve().parent / "data"
RG_FAMILIES = ("math", "algorithmic", "cognition", "logic")
SUITES = ("rg-hard", "math", "science", "code", "envs")
EXAMPLES = {"math": DATA / "math_example.jsonl", "science": DATA / "science_example.jsonl", "code": DATA / "code_example.jsonl"}


class SuiteError(InputError, ValueError):
    """A suite that cannot be loaded: the message names the file, the line and the fix."""


class Settings(msgspec.Struct, kw_only=True):
    episodes: int  # per dataset (rg-hard, envs) or per question (math, science, code)
    max_turns: int
    max_tokens: int
    temperature: float


DEFAULTS = {
    "rg-hard": Settings(episodes=8, max_turns=2, max_tokens=8192, temperature=0.6),
    "math": Settings(episodes=64, max_turns=1, max_tokens=32768, temperature=1.0),
    "science": Settings(episodes=8, max_turns=1, max_tokens=32768, temperature=0.7),
    "code": Settings(episodes=1, max_turns=1, max_tokens=16384, temperature=0.2),
    "envs": Settings(episodes=8, max_turns=25, max_tokens=8192, temperature=0.6),
}


class Item(msgspec.Struct, frozen=True, kw_only=True):
    """One episode to play; (suite, dataset, episode) is its key in the results, with the model."""

    kind: str  # rg | math | science | code | env
    dataset: str
    family: str
    episode: str
    rg: ReasoningGymTask | None = None
    prompt: str = ""  # math, science, code: the first user message
    answer: str = ""  # math: the reference answer; science: its letter
    choices: int = 0  # science: how many
    tests: str = ""  # code
    reference: str = ""  # what the oracle answers with (a reply that is right)
    code: str = ""  # env: the environment's source
    skill: str = ""
    seed: int = 0
    hint: str = ""  # env with --hinted: played with this hint (the hinted arm); "": without


class Suite(msgspec.Struct, kw_only=True):
    name: str  # rg-hard, math, ...
    key: str  # the suite part of a result's key: the name, plus the file for the local suites
    items: list[Item]
    settings: Settings
    families: list[str]  # in table order


def rg_hard_configs() -> dict[str, dict]:
    return json.loads(RG_HARD_FILE.read_text())["datasets"]


def _rg_hard(settings: Settings, datasets: list[str] | None) -> Suite:
    configs = rg_hard_configs()
    names = list(configs) if not datasets else datasets
    unknown = [n for n in names if n not in configs]
    if unknown:
        raise SuiteError(f"--datasets: {', '.join(unknown)} not in the rg-hard suite (known: {', '.join(sorted(configs))})")
    items = []
    for name in names:
        for i in range(settings.episodes):
            rg = ReasoningGymTask(dataset=name, params=configs[name]["params"], seed=42, size=max(settings.episodes, 8),
                                  index=i, max_turns=settings.max_turns, max_tokens=settings.max_tokens,
                                  temperature=settings.temperature)
            items.append(Item(kind="rg", dataset=name, family=configs[name]["category"], episode=str(i), rg=rg))
    return Suite(name="rg-hard", key="rg-hard", items=items, settings=settings, families=list(RG_FAMILIES))


def _rows(path: Path) -> list[tuple[int, dict]]:
    if not path.is_file():
        raise SuiteError(f"suite file {path} does not exist")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SuiteError(f"{path} line {number} is not JSON: {exc.msg}") from None
        if not isinstance(row, dict):
            raise SuiteError(f"{path} line {number} must be a JSON object")
        rows.append((number, row))
    if not rows:
        raise SuiteError(f"suite file {path} holds no items")
    return rows


def _need(path: Path, number: int, row: dict, key: str, kind) -> object:
    value = row.get(key)
    if not isinstance(value, kind) or (isinstance(value, str) and not value.strip()):
        raise SuiteError(f"{path} line {number}: `{key}` must be a non-empty {getattr(kind, '__name__', 'value')}")
    return value


def _local(name: str, path: Path, settings: Settings) -> Suite:
    items = []
    for number, row in _rows(path):
        ident = str(row.get("id", number))
        if name == "math":
            answer = row.get("answer")
            if answer is None or str(answer).strip() == "":
                raise SuiteError(f"{path} line {number}: `answer` is missing")
            base = dict(prompt=scoring.math_prompt(str(_need(path, number, row, "question", str))), answer=str(answer),
                        reference=f"The answer is \\boxed{{{answer}}}.")
        elif name == "science":
            choices = _need(path, number, row, "choices", list)
            try:
                letter = scoring.answer_letter(row.get("answer"), choices)
            except ValueError as exc:
                raise SuiteError(f"{path} line {number}: {exc}") from None
            base = dict(prompt=scoring.science_prompt(str(_need(path, number, row, "question", str)), [str(c) for c in choices]),
                        answer=letter, choices=len(choices), reference=f"\\boxed{{{letter}}}")
        else:
            solution = row.get("solution", "")
            base = dict(prompt=scoring.code_prompt(str(_need(path, number, row, "prompt", str))),
                        tests=str(_need(path, number, row, "tests", str)), reference=f"```python\n{solution}\n```" if solution else "")
        for s in range(settings.episodes):
            items.append(Item(kind=name, dataset=path.stem, family=name, episode=f"{ident}.{s}", **base))
    return Suite(name=name, key=f"{name}:{path.resolve()}", items=items, settings=settings, families=[name])


def _envs(path: Path, settings: Settings, hinted: bool = False) -> Suite:
    """Every environment of the folder, `episodes` plays each; `hinted`: as many more with its manifest hint, the
    families then being the two arms (no_hint, hint) so that the table's family rows are the two win rates."""
    if not path.is_dir():
        raise SuiteError(f"--suite envs needs --file DIR, a folder of environment .py files ({path} is not a folder)")
    skills, hints = {}, {}
    if (path / "manifest.json").is_file():
        try:
            entries = json.loads((path / "manifest.json").read_text())
            skills = {Path(e["file"]).stem: e.get("skill", "") for e in entries}
            hints = {Path(e["file"]).stem: e.get("hint", "") for e in entries}
        except (json.JSONDecodeError, TypeError, KeyError, AttributeError) as exc:
            raise SuiteError(f"{path / 'manifest.json'} is not a list of {{file, skill}} objects ({exc})") from None
    files = sorted(path.glob("*.py"))
    if not files:
        raise SuiteError(f"{path} holds no environment .py files")
    if hinted and not any(hints.get(file.stem) for file in files):
        raise SuiteError(f"--hinted: {path / 'manifest.json'} gives no environment of {path} a hint")
    items = []
    for file in files:
        skill = skills.get(file.stem) or "envs"
        arms = [("", file.stem, "no_hint" if hinted else skill)]
        if hinted and hints.get(file.stem):
            arms.append((hints[file.stem], f"{file.stem}+hint", "hint"))
        for hint, dataset, family in arms:
            for i in range(settings.episodes):
                items.append(Item(kind="env", dataset=dataset, family=family, episode=str(i), code=file.read_text(),
                                  skill=skill, seed=i, hint=hint))
    families = sorted({item.family for item in items})
    return Suite(name="envs", key=f"envs:{path.resolve()}", items=items, settings=settings, families=families)


def load_suite(name: str, *, path: str | Path | None = None, datasets: list[str] | None = None, episodes: int | None = None,
               max_turns: int | None = None, max_tokens: int | None = None, temperature: float | None = None,
               hinted: bool = False) -> Suite:
    if name not in SUITES:
        raise SuiteError(f"unknown suite {name!r} (known: {', '.join(SUITES)})")
    d = DEFAULTS[name]
    settings = Settings(
        episodes=d.episodes if episodes is None else episodes, max_turns=d.max_turns if max_turns is None else max_turns,
        max_tokens=d.max_tokens if max_tokens is None else max_tokens,
        temperature=d.temperature if temperature is None else temperature,
    )
    if settings.episodes < 1 or settings.max_turns < 1 or settings.max_tokens < 1:
        raise SuiteError("--episodes, --turns and --max-tokens must be at least 1")
    if name == "rg-hard":
        if path:
            raise SuiteError("--suite rg-hard takes no --file (its configurations are built in; reduce it with --datasets)")
        return _rg_hard(settings, datasets)
    if datasets:
        raise SuiteError("--datasets is for --suite rg-hard")
    if hinted and name != "envs":
        raise SuiteError("--hinted is for --suite envs")
    if name == "envs":
        if not path:
            raise SuiteError("--suite envs needs --file DIR, a folder of environment .py files")
        return _envs(Path(path), settings, hinted)
    return _local(name, Path(path) if path else EXAMPLES[name], settings)
