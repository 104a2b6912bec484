"""The tool-use setting's validator (called by actors/sandbox/validator.py for a `ToolUseBaseEnv` design).

Static: the games' checks (the step() method is inherited), plus `derives_base`: the Env class derives from
ToolUseBaseEnv, which the design neither imports nor defines. In the sandbox, for each seed:
- `reset_returns`: reset(seed) gives (non-empty str, dict), the first instruction;
- `tool_specs`: 3-8 tools, each with a description and a parameters schema, at least one enum parameter, 3-5
  instructions and one state check each; `schemas_valid`: every schema is the JSON Schema subset the tools use
  (type object, properties, required within them, enum values of the declared type, known types), checked
  structurally (`schema_problem`);
- `criteria_at_reset`: each state check evaluates on the reset state without raising (rejected only when one
  raises at every seed, as the reference's reset gate), and no more than half are already true;
- `deterministic`: every tool, called twice from the same reset state with the same arguments (the plan's, else
  arguments made from its schema), returns the same text;
- `solution_solves`: `solution()` (the tool-call plan) played as a scripted agent's replies completes every
  instruction and its answer earns 1.0; `has_distractor`: at least one tool the plan never calls;
- `hint_not_leaked`: the hint is never in a result; `within_limits`, `clean_exit` as for games.
`quality_checks=False` turns `has_distractor` and `hint_not_leaked` into notes.
"""

from __future__ import annotations

import ast

from actors.sandbox.pool import EpisodeFailed, SandboxPool
from actors.sandbox.repair import repair_fstring_braces
from actors.sandbox.validator import Check, CheckFailed, Verdict, static_checks
from actors.tool_use import BASE_CLASS
from actors.tool_use.parsing import parse_reply

TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict, "null": type(None)}
MIN_TOOLS, MAX_TOOLS, MIN_MESSAGES, MAX_MESSAGES = 3, 8, 3, 5
MAX_RESULT_CHARS = 4000
STATIC_CHECKS = ("parses", "single_env_class", "derives_base", "init_signature", "reset_signature",
                 "allowed_imports", "no_dunder_tricks")
DYNAMIC_CHECKS = ("loads", "reset_returns", "tool_specs", "schemas_valid", "criteria_at_reset", "deterministic",
                  "solution_solves", "has_distractor", "hint_not_leaked", "within_limits", "clean_exit")
QUALITY = ("has_distractor", "hint_not_leaked")


def schema_problem(schema, where: str = "parameters", depth: int = 0) -> str:
    """What is wrong with a parameter schema ("" if nothing): the structural subset of JSON Schema tools use."""
    if depth > 8:
        return f"{where}: nested too deeply"
    if not isinstance(schema, dict):
        return f"{where}: a schema must be an object"
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    if not kinds and "enum" not in schema:
        return f"{where}: no type"
    bad = [k for k in kinds if k not in TYPES]
    if bad:
        return f"{where}: unknown type {bad[0]!r} (known: {', '.join(TYPES)})"
    if "description" in schema and not isinstance(schema["description"], str):
        return f"{where}: description must be a string"
    if "enum" in schema:
        enum = schema["enum"]
        if not isinstance(enum, list) or not enum:
            return f"{where}: enum must be a non-empty list"
        for value in enum:
            if kinds and not any(isinstance(value, TYPES[k]) and not (k in ("integer", "number") and isinstance(value, bool)) for k in kinds):
                return f"{where}: enum value {value!r} is not of type {kind}"
    if "object" in kinds or "properties" in schema:
        properties = schema.get("properties", {})
        if not isinstance(properties, dict):
            return f"{where}: properties must be an object"
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            return f"{where}: required must be a list of names"
        missing = [r for r in required if r not in properties]
        if missing:
            return f"{where}: required names {missing[0]!r}, which is not among its properties"
        for name, sub in properties.items():
            problem = schema_problem(sub, f"{where}.{name}", depth + 1)
            if problem:
                return problem
    if "items" in schema:
        return schema_problem(schema["items"], f"{where}[]", depth + 1)
    return ""


def has_enum(schema, depth: int = 0) -> bool:
    if not isinstance(schema, dict) or depth > 8:
        return False
    return "enum" in schema or any(has_enum(s, depth + 1) for s in (schema.get("properties") or {}).values()) \
        or has_enum(schema.get("items"), depth + 1)


def example_value(schema):
    """An argument a schema accepts: the first enum value, else a plain value of its type."""
    schema = schema if isinstance(schema, dict) else {}
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object":
        return {k: example_value(v) for k, v in (schema.get("properties") or {}).items() if k in (schema.get("required") or [])}
    return {"integer": 1, "number": 1.0, "boolean": True, "array": [], "null": None}.get(kind, "test")


def _static(source: str) -> tuple[list[Check], str]:
    parsed, tree = static_checks(source)
    if tree is None:
        return parsed, ""
    checks, found = parsed[:1], {c.name: c for c in parsed[1:]}
    checks.append(found["single_env_class"])
    class_name = found["single_env_class"].detail if found["single_env_class"].passed else ""
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    imported = any(isinstance(n, (ast.Import, ast.ImportFrom)) and any(BASE_CLASS in (a.asname or a.name) for a in n.names)
                   for n in ast.walk(tree))
    defined = any(isinstance(n, ast.ClassDef) and n.name == BASE_CLASS for n in tree.body)
    if node is None:
        checks.append(Check("derives_base", False, "not run: single_env_class failed"))
    elif imported or defined:
        checks.append(Check("derives_base", False, f"{BASE_CLASS} is provided by the sandbox: do not import or define it"))
    elif not any(isinstance(b, ast.Name) and b.id == BASE_CLASS for b in node.bases):
        checks.append(Check("derives_base", False, f"class {class_name} must derive from {BASE_CLASS}"))
    else:
        checks.append(Check("derives_base", True, f"class {class_name}({BASE_CLASS})"))
    checks += [found[n] for n in ("init_signature", "reset_signature", "allowed_imports", "no_dunder_tricks")]
    return checks, class_name


async def _call(awaitable, check: str):
    try:
        return await awaitable
    except EpisodeFailed as failure:
        limit = failure.kind in ("timeout", "crashed", "limit")
        raise CheckFailed("within_limits" if limit else check, f"{failure.kind}: {failure.detail}") from None


class _Seed:
    """The dynamic checks of one seed in one episode; `notes` collects quality findings that may only be notes."""

    def __init__(self, episode, seed: int, hint: str | None, quality: bool, tool_timeout_s: float | None) -> None:
        self.episode, self.seed, self.hint, self.quality, self.timeout = episode, seed, hint, quality, tool_timeout_s
        self.results: dict[str, Check] = {}
        self.criteria_errors: list[str] = []

    def _seen(self, text: str, where: str) -> None:
        if self.hint and self.hint in text:
            if self.quality:
                raise CheckFailed("hint_not_leaked", f"seed {self.seed}, {where}: the hint appears in a result")
            self.results["hint_not_leaked"] = Check("hint_not_leaked", True, f"note: the hint appears at {where} (quality checks off)")

    async def _reset(self) -> str:
        observation, info = await _call(self.episode.reset(seed=self.seed), "reset_returns")
        if not observation.strip():
            raise CheckFailed("reset_returns", f"seed {self.seed}: reset() returned an empty first instruction")
        self._seen(observation, "reset")
        return observation

    async def _tool(self, name: str, arguments: dict, check: str) -> str:
        result = await _call(self.episode.call_tool(name, arguments, timeout_s=self.timeout, max_chars=MAX_RESULT_CHARS), check)
        self._seen(result, f"{name}()")
        return result

    async def run(self) -> None:
        first = await self._reset()
        spec = await _call(self.episode.inspect_tools(), "tool_specs")
        self._check_specs(spec, first)
        plan = await _call(self.episode.solution(), "solution_solves")
        if not plan:
            raise CheckFailed("solution_solves", "solution() must return the tool-call plan (tool calls, then the answer)")
        planned = {}
        for reply in plan:
            for call in parse_reply(reply).calls:
                planned.setdefault(call.name, call.arguments)
        for name, parameters in spec.tools.items():  # deterministic: twice from the same reset state
            arguments = planned.get(name) or example_value(parameters.get("parameters", {}))
            outputs = []
            for _ in range(2):
                await self._reset()
                outputs.append(await self._tool(name, arguments, "deterministic"))
            if outputs[0] != outputs[1]:
                raise CheckFailed("deterministic", f"seed {self.seed}: {name}({arguments}) gave two different results "
                                             f"from the same reset state")
            if outputs[0].startswith(f"Error: tool {name!r} is not implemented"):
                raise CheckFailed("tool_specs", f"tool {name!r} has no tool_{name} method")
        await self._reset()
        await self._play(plan)
        unused = [name for name in spec.tools if name not in planned]
        self.results.setdefault("has_distractor", Check(
            "has_distractor", bool(unused) or not self.quality,
            f"distractors: {', '.join(unused)}" if unused else "no tool is left unused by the plan (no distractor)"
            + ("" if self.quality else " (note: quality checks off)")))

    def _check_specs(self, spec, first: str) -> None:
        tools, messages, criteria = spec.tools, spec.messages, spec.criteria
        if not spec.has_state:
            raise CheckFailed("tool_specs", "reset() must set self._state to a dict")
        if not isinstance(tools, dict) or not MIN_TOOLS <= len(tools) <= MAX_TOOLS:
            raise CheckFailed("tool_specs", f"self._tools must hold {MIN_TOOLS}-{MAX_TOOLS} tools, found {len(tools or {})}")
        if not messages or not MIN_MESSAGES <= len(messages) <= MAX_MESSAGES:
            raise CheckFailed("tool_specs", f"self._user_messages must hold {MIN_MESSAGES}-{MAX_MESSAGES} instructions, "
                                      f"found {len(messages or [])}")
        if len(criteria) != len(messages):
            raise CheckFailed("tool_specs", f"{len(messages)} instructions but {len(criteria)} state checks in self._message_criteria")
        if spec.current != 0:
            raise CheckFailed("tool_specs", "reset() must set self._current_msg = 0")
        for name, tool in tools.items():
            if not isinstance(tool, dict) or not isinstance(tool.get("description"), str) or "parameters" not in tool:
                raise CheckFailed("tool_specs", f"tool {name!r} needs a description and a parameters schema")
            problem = schema_problem(tool["parameters"], f"{name}.parameters")
            if not problem and tool["parameters"].get("type") != "object":
                problem = f"{name}.parameters: the type must be object"
            if problem:
                raise CheckFailed("schemas_valid", problem)
        if not any(has_enum(t["parameters"]) for t in tools.values()):
            raise CheckFailed("tool_specs", "no tool has an enum parameter (at least one is required)")
        errors = [c for c in criteria if c.startswith("error")]
        if errors:
            self.criteria_errors.append(errors[0])
        met = sum(c == "true" for c in criteria)
        if met * 2 > len(criteria):
            raise CheckFailed("criteria_at_reset", f"{met} of {len(criteria)} state checks already hold at reset")

    async def _play(self, plan: list[str]) -> None:
        for index, reply in enumerate(plan):
            parsed = parse_reply(reply)
            if parsed.answer is None and parsed.calls:
                for call in parsed.calls:
                    await self._tool(call.name, call.arguments, "solution_solves")
                continue
            result = await _call(self.episode.step(reply), "solution_solves")
            self._seen(result.observation, f"step {index}")
            if result.terminated:
                if result.reward < 1.0:
                    raise CheckFailed("solution_solves", f"seed {self.seed}: the plan's answer earned {result.reward}")
                return
        spec = await _call(self.episode.inspect_tools(), "solution_solves")
        raise CheckFailed("solution_solves", f"seed {self.seed}: the plan ended at instruction {spec.current + 1} of "
                                       f"{len(spec.messages or [])} without a winning answer")


async def validate_tool_use(pool: SandboxPool, source: str, *, hint: str | None = None,
                            seeds: tuple[int, ...] = (0, 1, 2), quality_checks: bool = True,
                            tool_timeout_s: float | None = None) -> Verdict:
    """The tool-use checks (module docstring). Never raises for a bad design."""
    hint = hint.strip() if hint and hint.strip() else None
    repaired = repair_fstring_braces(source)
    checks, class_name = _static(repaired)
    by_name = {c.name: c for c in checks}
    if all(c.passed for c in checks):
        by_name.update(await _dynamic(pool, repaired, hint, tuple(seeds), quality_checks, tool_timeout_s))
    order = STATIC_CHECKS + DYNAMIC_CHECKS
    first_failed = next((by_name[n] for n in order if n in by_name and not by_name[n].passed), None)
    ordered = [by_name.get(n) or Check(n, False, f"not run: {first_failed.name} failed" if first_failed else "not run")
               for n in order]
    reason = f"{first_failed.name}: {first_failed.detail}" if first_failed else ""
    return Verdict(valid=first_failed is None, reason=reason, checks=ordered, source=repaired, class_name=class_name)


async def _dynamic(pool, source, hint, seeds, quality, tool_timeout_s) -> dict[str, Check]:
    results: dict[str, Check] = {}
    errors_at: list[str] = []
    try:
        for seed in seeds:
            try:
                async with pool.open_episode(source, wait_for_cleanup=True) as episode:
                    results["loads"] = Check("loads", True, f"{episode.class_name}() instantiated in the sandbox")
                    play = _Seed(episode, seed, hint, quality, tool_timeout_s)
                    await play.run()
            except EpisodeFailed as failure:  # raised while loading
                raise CheckFailed("within_limits" if failure.kind in ("timeout", "crashed", "limit") else "loads",
                            f"{failure.kind}: {failure.detail}") from None
            if episode.cleanup_problem:
                raise CheckFailed("clean_exit", f"seed {seed}: {episode.cleanup_problem}")
            errors_at += play.criteria_errors[:1]
            for name, check in play.results.items():
                if not check.passed or name not in results:
                    results[name] = check
    except CheckFailed as stop:
        results[stop.check] = Check(stop.check, False, stop.detail)
        return results
    if len(errors_at) == len(seeds):
        results["criteria_at_reset"] = Check("criteria_at_reset", False, f"a state check raises at every seed: {errors_at[0]}")
    for name, detail in (("reset_returns", "reset(seed) returned the first instruction"),
                         ("tool_specs", f"{MIN_TOOLS}-{MAX_TOOLS} tools with an enum parameter, {MIN_MESSAGES}-{MAX_MESSAGES} instructions, one state check each"),
                         ("schemas_valid", "every parameters schema is a valid JSON Schema object"),
                         ("criteria_at_reset", "every state check evaluates at reset, at most half already hold"),
                         ("deterministic", "every tool gave the same result twice from the same reset state"),
                         ("solution_solves", f"the solution() plan completed every instruction at seeds {list(seeds)}"),
                         ("hint_not_leaked", "the hint never appeared" if hint else "no hint given"),
                         ("within_limits", "no timeout, crash or resource limit"),
                         ("clean_exit", "every episode left the interpreter as it found it")):
        results.setdefault(name, Check(name, True, detail))
    return results
