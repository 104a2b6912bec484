"""The validator: every valid environment (tests/actors/sandbox/valid/*.py and the seeds) passes, and each check
turns away the design it exists for, with the check list complete and in order."""

import json
from pathlib import Path

import msgspec
import pytest

from actors.sandbox import Check, Verdict
from actors.settings import validate_environment
from actors.sandbox.validator import DYNAMIC_CHECKS, STATIC_CHECKS
from engine.protocol.paths import SEEDS_DIR
from tests.actors.sandbox.sandbox_helpers import GUESS_SOURCE

HERE = Path(__file__).parent
SEEDS = SEEDS_DIR
VALID = sorted(HERE.glob("valid/*.py")) + sorted(SEEDS.glob("*.py"))
HINTS = {entry["file"]: entry["hint"] for entry in json.loads((SEEDS / "manifest.json").read_text())} \
    if (SEEDS / "manifest.json").exists() else {}


def validate(shared_pool, source: str, **options) -> Verdict:
    return shared_pool.run(lambda pool: validate_environment(pool, source, **options), shared_pool.pool)


def failed_checks(verdict: Verdict) -> list[str]:
    return [c.name for c in verdict.checks if not c.passed and not c.detail.startswith("not run")]


def with_changes(*replacements: tuple[str, str]) -> str:
    source = GUESS_SOURCE
    for old, new in replacements:
        assert old in source, old
        source = source.replace(old, new)
    return source


def test_there_are_valid_environments_to_check():
    assert len(VALID) >= 5


@pytest.mark.parametrize("path", VALID, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_valid_environments_pass(path, shared_pool):
    source = path.read_text()
    verdict = validate(shared_pool, source, hint=HINTS.get(path.name) if path.parent == SEEDS else None)
    assert verdict.valid, verdict.reason
    assert verdict.reason == ""
    assert [c.name for c in verdict.checks] == list(STATIC_CHECKS + DYNAMIC_CHECKS)
    assert all(c.passed for c in verdict.checks)
    assert verdict.source == source and verdict.class_name.endswith("Env")


def test_a_verdict_is_a_frozen_record_of_every_check(shared_pool):
    verdict = validate(shared_pool, GUESS_SOURCE)
    assert verdict.valid and verdict.class_name == "GuessEnv"
    assert all(isinstance(c, Check) and c.detail for c in verdict.checks)
    with pytest.raises(AttributeError):
        verdict.valid = False
    decoded = msgspec.json.decode(msgspec.json.encode(verdict), type=Verdict)
    assert decoded == verdict


def test_a_syntax_error_fails_parsing_and_nothing_else_runs(shared_pool):
    verdict = validate(shared_pool, "class BrokenEnv(:\n    pass\n")
    assert not verdict.valid and verdict.reason.startswith("parses: SyntaxError")
    assert failed_checks(verdict) == ["parses"]
    assert all(c.detail == "not run: parses failed" for c in verdict.checks[1:])
    assert len(verdict.checks) == len(STATIC_CHECKS + DYNAMIC_CHECKS)


def test_unescaped_fstring_braces_are_repaired_before_validating(shared_pool):
    broken = with_changes(('"Answer as \\\\boxed{N}."', 'f"Answer as \\\\boxed{a number} ({self.turn})."'))
    verdict = validate(shared_pool, broken)
    assert verdict.valid, verdict.reason
    assert verdict.source != broken and "\\\\boxed{{a number}}" in verdict.source


@pytest.mark.parametrize(("source", "check", "detail"), [
    (GUESS_SOURCE + "\n\nclass OtherEnv(GuessEnv):\n    pass\n", "single_env_class", "found GuessEnv, OtherEnv"),
    (with_changes(("def __init__(self, max_turns=12", "def __init__(self, max_turns")), "init_signature",
     "give every parameter a default"),
    (with_changes(("def reset(self, seed=None)", "def reset(self, level=1)")), "reset_signature", "`seed`"),
    (with_changes(("def step(self, action)", "def step(self, action, extra)")), "step_signature", "step(self,"),
    (with_changes(("import re\n", "import re\nimport os\n")), "allowed_imports", "imports outside the allow-list: os"),
    (with_changes(("self.turn = 0\n", "self.turn = 0\n        self.peek = vars(self)\n")), "no_dunder_tricks",
     "call to vars()"),
    (with_changes(("return [str(self.target)]", "return [str(self.target % 10 + 1)]")), "solution_wins",
     "playing solution() did not end"),
    (with_changes(('return "Correct!", 1.0', 'return "Correct!", 2.0')), "rewards_finite_in_range",
     "reward 2.0 outside [-1.0, 1.0]"),
    (with_changes(("if match is None:", "if match is None:\n            raise ValueError(action)")),
     "malformed_action", "ValueError"),
    (with_changes(('return f"Guess a number', 'return "x" * 9000 + f"Guess a number')), "observation_size",
     "observation of 9040 characters (at most 8000)"),
    (with_changes(("self.turn >= self.max_turns, {}", "False, {}"),
                  ("self.turn >= self.max_turns, {\"guess\"", "False, {\"guess\""),
                  ('return "Correct!", 1.0, True', 'return "Correct!", 0.0, False')), "ends_within_max_turns",
     "had not ended after 25 turns"),
    (with_changes(('f"Guess a number', 'f"The number is {self.target}. Guess a number')), "hint_not_leaked",
     "the hint appears"),
])
def test_each_check_rejects_what_it_is_for(shared_pool, source, check, detail):
    hint = "The number is" if check == "hint_not_leaked" else None
    verdict = validate(shared_pool, source, hint=hint)
    assert not verdict.valid
    assert failed_checks(verdict) == [check], verdict.reason
    assert verdict.reason.startswith(f"{check}: ") and detail in verdict.reason, verdict.reason


def test_a_hint_only_matters_when_given(shared_pool):
    leaky = with_changes(('f"Guess a number', 'f"Secret plan. Guess a number'))
    assert validate(shared_pool, leaky).valid
    assert not validate(shared_pool, leaky, hint="  Secret plan  ").valid


def _check(verdict: Verdict, name: str) -> Check:
    return next(c for c in verdict.checks if c.name == name)


def test_hidden_randomness_and_a_seed_ignoring_game_are_accepted(shared_pool):
    """Hidden information is what the designer should write: one first observation for every seed (hidden wiring)
    or one game for every seed (a fixed puzzle) passes, `seeds_differ` noting it where every seed plays the same."""
    wiring = validate(shared_pool, (HERE / "valid" / "hidden_wiring.py").read_text())
    assert wiring.valid, wiring.reason
    puzzle = validate(shared_pool, (HERE / "valid" / "fixed_puzzle.py").read_text())
    assert puzzle.valid, puzzle.reason
    note = _check(puzzle, "seeds_differ")
    assert note.passed and note.detail.startswith("note: seeds 0, 1, 2 all gave the same"), note.detail
    fixed_seed = validate(shared_pool, with_changes(("random.Random(seed)", "random.Random(7)")))
    assert fixed_seed.valid and _check(fixed_seed, "seeds_differ").detail.startswith("note: "), fixed_seed.reason


@pytest.mark.parametrize(("source", "check", "hint"), [
    (with_changes(("return [str(self.target)]", "return [str(self.target % 10 + 1)]")), "solution_wins", None),
    (with_changes(('f"Guess a number', 'f"The number is {self.target}. Guess a number')), "hint_not_leaked", "The number is"),
])
def test_without_quality_checks_the_projects_filters_are_notes(shared_pool, source, check, hint):
    """`play.quality_checks = false` (the paper preset): what the reference's validation accepts is accepted."""
    assert not validate(shared_pool, source, hint=hint).valid
    verdict = validate(shared_pool, source, hint=hint, quality_checks=False)
    assert verdict.valid, verdict.reason
    assert _check(verdict, check).passed and _check(verdict, check).detail.startswith("note: ")


def test_without_quality_checks_rewards_may_reach_the_references_range(shared_pool):
    two = with_changes(('return "Correct!", 1.0', 'return "Correct!", 2.0'))
    assert validate(shared_pool, two, quality_checks=False).valid
    eleven = with_changes(('return "Correct!", 1.0', 'return "Correct!", 11.0'))
    verdict = validate(shared_pool, eleven, quality_checks=False)
    assert not verdict.valid and verdict.reason.startswith("rewards_finite_in_range: "), verdict.reason
    assert "outside [-10.0, 10.0]" in verdict.reason

