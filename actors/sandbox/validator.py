"""The games' validator, which every game design passes before it can be played (a tool-use design gets
actors/tool_use/validator.py's; actors/settings.py `validate_environment` picks), and what both share: `Check`,
`Verdict`, `static_checks`, `CheckFailed`.

    verdict = await validate_game(pool, source, hint=hint, max_turns=25, seeds=(0, 1, 2), quality_checks=True)
    if not verdict.valid: print(verdict.reason)

First the f-string brace repair (`repair.py`), then the static checks (`static_checks.py`, a quality filter),
then dynamic checks inside the sandbox: for every seed the environment is played twice, the second time in a
never-used worker (so hash randomisation and `id()` differ), each play being a few malformed actions, a fuzzed
episode and the `solution()` (or a fixed script). The verdict lists every check; a check that could not run
because an earlier one failed says so.

A check rejects only what the reference's own validation rejects (no loadable `*Env`, a wrong signature or
return type, an exception on ordinary input) or what protects the engine (escapes and imports the sandbox
refuses, limits, hangs and episodes that never end, non-finite rewards, huge observations, non-determinism for a
given seed, which would make a stored play unreproducible). `seeds_differ` never rejects: an environment whose
seeds all play the same game (hidden randomness behind one first observation, or a fixed puzzle) is accepted with
a note. `quality_checks=False` (`play.quality_checks`, the reference) also turns the project's quality filters
into notes: `solution_wins` (solution() must win) and `hint_not_leaked`, and widens rewards to the reference's
[-10, 10].
"""

import ast
import math
import random
from typing import Any

import msgspec

from actors.sandbox.pool import Episode, EpisodeFailed, SandboxPool
from actors.sandbox.repair import repair_fstring_braces
from actors.sandbox.static_checks import run_static_checks

MAX_OBSERVATION_CHARS = 8000
REWARD_RANGE = (-1.0, 1.0)
REFERENCE_REWARD_RANGE = (-10.0, 10.0)  # what the reference's validation allows (the engine clamps returns to [-1, 1])
QUALITY_CHECKS = ("solution_wins", "hint_not_leaked")  # notes, not rejections, with quality_checks=False
MALFORMED_ACTIONS = ("", "hello", "\\boxed{", "\\boxed{}", "\\boxed{\\boxed{1}}", "}{" * 50, "x" * 5000,
                     "\u202e\u0000\U0001f600 \u00f0\u0178\u02dc\u20ac")  # control characters, mojibake
FUZZ_WORDS = ("yes", "no", "up", "down", "left", "right", "A", "B", "C", "D", "red", "blue", "0", "-1", "1 2",
              "1,2", "3 4", "a1", "pass", "help", "abc", "1/2", "0.5", "10", "100", "north", "done")
SCRIPTED_ACTIONS = tuple(f"\\boxed{{{n}}}" for n in (1, 2, 3, 0, 4, 5, 6, 7, 8, 9))
DYNAMIC_CHECKS = (
    "loads", "return_types", "no_exceptions", "within_limits", "clean_exit", "rewards_finite_in_range",
    "ends_within_max_turns", "deterministic", "seeds_differ", "observation_size", "malformed_action",
    "hint_not_leaked", "solution_wins",
)
STATIC_CHECKS = ("parses", "single_env_class", "init_signature", "reset_signature", "step_signature",
                 "allowed_imports", "no_dunder_tricks")


class Check(msgspec.Struct, frozen=True):
    """One check of a verdict; `detail` says what was found (or why the check did not run)."""

    name: str
    passed: bool
    detail: str


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """`reason` is "" when valid, else "<check>: <detail>" of the first failed check; `source` is after repair."""

    valid: bool
    reason: str
    checks: list[Check]
    source: str
    class_name: str


def fuzz_actions(seed: int | None, count: int) -> list[str]:
    rng = random.Random(f"fuzz-{seed}")
    actions = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.45:
            actions.append(f"\\boxed{{{rng.randint(-2, 12)}}}")
        elif roll < 0.85:
            actions.append(f"\\boxed{{{rng.choice(FUZZ_WORDS)}}}")
        else:
            actions.append(rng.choice(MALFORMED_ACTIONS[:5]))
    return actions


def boxed(action: str) -> str:
    return action if action.lstrip().startswith("\\boxed{") else f"\\boxed{{{action}}}"


class CheckFailed(Exception):
    """A dynamic check failed; the plays stop (raised by both settings' validators)."""

    def __init__(self, check: str, detail: str) -> None:
        super().__init__(check)
        self.check, self.detail = check, detail


class _Play:
    """One full play of one seed (malformed actions, a fuzzed episode, the solution); records what it saw."""

    def __init__(self, episode: Episode, seed: int, max_turns: int, hint: str | None, quality: bool = True) -> None:
        self.episode, self.seed, self.max_turns, self.hint, self.quality = episode, seed, max_turns, hint, quality
        self.leaks: list[str] = []  # where the hint appeared, when that is a note (quality checks off)
        self.trajectory: list[Any] = []
        self.first_observation = ""
        self.solution: list[str] | None = None
        self.solution_outcome = ""
        self.signature: list[Any] = []  # what must depend on the seed: first observation, solution, script

    def _observe(self, observation: str, where: str) -> None:
        if len(observation) > MAX_OBSERVATION_CHARS:
            raise CheckFailed("observation_size", f"{where}: observation of {len(observation)} characters "
                                            f"(at most {MAX_OBSERVATION_CHARS})")
        if self.hint and self.hint in observation:
            if self.quality:
                raise CheckFailed("hint_not_leaked", f"{where}: the hint appears in the observation")
            self.leaks.append(where)

    async def _reset(self) -> str:
        observation, _ = await _attributed(self.episode.reset(seed=self.seed), "no_exceptions")
        self._observe(observation, f"reset(seed={self.seed})")
        return observation

    async def _step(self, action: str, phase: str) -> tuple[str, float, bool, bool]:
        result = await _attributed(self.episode.step(action), phase)
        where = f"seed {self.seed}, step({action[:40]!r})"
        self._observe(result.observation, where)
        low, high = REWARD_RANGE if self.quality else REFERENCE_REWARD_RANGE
        if not low <= result.reward <= high:
            raise CheckFailed("rewards_finite_in_range", f"{where}: reward {result.reward} outside [{low}, {high}]")
        return result.observation, result.reward, result.terminated, result.truncated

    async def run(self) -> None:
        for action in MALFORMED_ACTIONS:
            await self._reset()
            self.trajectory.append(await self._step(action, "malformed_action"))
        self.first_observation = await self._reset()
        self.trajectory.append(self.first_observation)
        for action in fuzz_actions(self.seed, self.max_turns):
            step = await self._step(action, "no_exceptions")
            self.trajectory.append(step)
            if step[2] or step[3]:
                break
        else:
            raise CheckFailed("ends_within_max_turns", f"seed {self.seed}: the fuzzed episode had not ended after "
                                                 f"{self.max_turns} turns")
        await self._reset()
        self.solution = await _attributed(self.episode.solution(), "solution_wins")
        self.trajectory.append(self.solution)
        self.signature += [self.first_observation, self.solution]
        actions = [boxed(a) for a in self.solution] if self.solution is not None else list(SCRIPTED_ACTIONS)
        for action in actions:
            step = await self._step(action, "solution_wins")
            self.trajectory.append(step)
            self.signature.append(step)
            if step[2] or step[3]:
                won = step[2] and step[1] >= 1.0
                self.solution_outcome = "won" if won else f"ended with reward {step[1]}"
                break
        else:
            self.solution_outcome = "did not end"


async def _attributed(awaitable: Any, phase: str) -> Any:
    """Await a call, turning EpisodeFailed into a failure of the check it belongs to."""
    try:
        return await awaitable
    except EpisodeFailed as failure:
        raise CheckFailed(_check_for(failure, phase), f"{failure.kind}: {failure.detail}") from None


def _check_for(failure: EpisodeFailed, phase: str) -> str:
    if failure.kind == "invalid":
        return "loads"
    if failure.kind in ("timeout", "crashed", "limit"):
        return "within_limits"
    if failure.kind == "protocol":
        return "rewards_finite_in_range" if failure.detail.startswith("reward is") else "return_types"
    return phase


def static_checks(source: str) -> tuple[list[Check], ast.Module | None]:
    """`parses`, then every check of actors/sandbox/static_checks.py in its order (`single_env_class` first, whose
    detail names the class when it passes); no tree when the source does not parse. Both settings start here."""
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return [Check("parses", False, f"SyntaxError: {error.msg} (line {error.lineno})")], None
    return [Check("parses", True, "ast.parse succeeded")] + [Check(n, passed, detail) for n, passed, detail in run_static_checks(tree)], tree


def _static(source: str) -> tuple[list[Check], str]:
    checks, tree = static_checks(source)
    class_name = checks[1].detail if tree is not None and checks[1].passed else ""
    return checks, class_name


async def _dynamic(pool: SandboxPool, source: str, hint: str | None, max_turns: int,
                   seeds: tuple[int, ...], quality: bool = True) -> tuple[dict[str, Check], str]:
    results: dict[str, Check] = {}
    class_name = ""
    plays: list[tuple[_Play, _Play]] = []
    try:
        for seed in seeds:
            pair = []
            for fresh in (False, True):
                try:
                    async with pool.open_episode(source, fresh_worker=fresh, wait_for_cleanup=True) as episode:
                        class_name = episode.class_name
                        results["loads"] = Check("loads", True, f"{class_name}() instantiated in the sandbox")
                        play = _Play(episode, seed, max_turns, hint, quality)
                        await play.run()
                        pair.append(play)
                except EpisodeFailed as failure:  # raised while loading: whatever the kind, it did not load
                    raise CheckFailed("loads", f"{failure.kind}: {failure.detail}") from None
                if episode.cleanup_problem:
                    raise CheckFailed("clean_exit", f"seed {seed}: {episode.cleanup_problem}")
            plays.append((pair[0], pair[1]))
    except CheckFailed as stop:
        results[stop.check] = Check(stop.check, False, stop.detail)
        return results, class_name
    _conclude(results, plays, hint, max_turns, quality)
    return results, class_name


def _conclude(results: dict[str, Check], plays: list[tuple["_Play", "_Play"]], hint: str | None,
              max_turns: int, quality: bool = True) -> None:
    count = len(plays)
    results["return_types"] = Check("return_types", True, "reset -> (str, dict), step -> (str, float, bool, bool, "
                                                          "dict)")
    results["no_exceptions"] = Check("no_exceptions", True, f"{count} seeds x 2 plays without an exception")
    results["within_limits"] = Check("within_limits", True, "no timeout, crash or resource limit")
    results["clean_exit"] = Check("clean_exit", True, "every episode left the interpreter as it found it")
    low, high = REWARD_RANGE if quality else REFERENCE_REWARD_RANGE
    results["rewards_finite_in_range"] = Check("rewards_finite_in_range", True, f"every reward finite, in [{low:g}, {high:g}]")
    results["ends_within_max_turns"] = Check("ends_within_max_turns", True,
                                             f"every fuzzed episode ended within {max_turns} turns")
    results["observation_size"] = Check("observation_size", True, f"every observation <= {MAX_OBSERVATION_CHARS} "
                                                                  "characters")
    results["malformed_action"] = Check("malformed_action", True, f"{len(MALFORMED_ACTIONS)} malformed actions "
                                                                  "answered without an exception")
    leaks = [where for a, _ in plays for where in a.leaks]
    results["hint_not_leaked"] = Check("hint_not_leaked", True, f"note: the hint appears in the observation at {leaks[0]} "
                                       "(accepted: quality checks off)" if leaks else
                                       "the hint never appeared" if hint else "no hint given")
    differing = [a.seed for a, b in plays if _same(a.trajectory, b.trajectory) is False]
    results["deterministic"] = Check(
        "deterministic", not differing,
        f"seed {differing[0]} gave two different trajectories" if differing
        else "each seed gave the same trajectory twice (in two processes)")
    distinct = {repr(a.signature) for a, _ in plays}
    results["seeds_differ"] = Check(
        "seeds_differ", True,
        f"{len(distinct)} distinct games from {count} seeds" if len(distinct) > 1 or count < 2
        else f"note: seeds {', '.join(str(a.seed) for a, _ in plays)} all gave the same first observation, solution "
             "and scripted play (accepted: hidden randomness or a fixed puzzle)")
    if all(a.solution is None for a, _ in plays):
        results["solution_wins"] = Check("solution_wins", True, "no solution() offered")
    else:
        lost = [(a.seed, a.solution_outcome) for a, _ in plays if a.solution_outcome != "won"]
        detail = f"seed {lost[0][0]}: playing solution() {lost[0][1]}" if lost else f"solution() won all {count} seeds"
        if lost and not quality:
            detail = f"note: {detail} (accepted: quality checks off)"
        results["solution_wins"] = Check("solution_wins", not lost or not quality, detail)


def _same(first: list[Any], second: list[Any]) -> bool:
    if len(first) != len(second):
        return False
    for a, b in zip(first, second):
        if isinstance(a, tuple) and isinstance(b, tuple):
            if a[0] != b[0] or a[2:] != b[2:] or not (a[1] == b[1] or math.isnan(a[1]) and math.isnan(b[1])):
                return False
        elif a != b:
            return False
    return True


async def validate_game(pool: SandboxPool, source: str, *, hint: str | None, max_turns: int, seeds: tuple[int, ...],
                        quality_checks: bool) -> Verdict:
    """The games setting's checks (the module docstring), static then dynamic."""
    hint = hint.strip() if hint and hint.strip() else None
    repaired = repair_fstring_braces(source)
    checks, class_name = _static(repaired)
    by_name = {c.name: c for c in checks}
    static_failure = next((c for c in checks if not c.passed), None)
    if static_failure is None:
        dynamic, loaded_name = await _dynamic(pool, repaired, hint, max_turns, seeds, quality_checks)
        by_name.update(dynamic)
        class_name = loaded_name or class_name
    first_failed = next((by_name[n] for n in STATIC_CHECKS + DYNAMIC_CHECKS if n in by_name
                         and not by_name[n].passed), None)
    ordered = []
    for name in STATIC_CHECKS + DYNAMIC_CHECKS:
        check = by_name.get(name)
        if check is None:
            check = Check(name, False, f"not run: {first_failed.name} failed" if first_failed else "not run")
        ordered.append(check)
    reason = f"{first_failed.name}: {first_failed.detail}" if first_failed else ""
    return Verdict(valid=first_failed is None, reason=reason, checks=ordered, source=repaired, class_name=class_name)
