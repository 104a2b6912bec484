"""The tool-use setting's base class, `ToolUseBaseEnv`, and the worker's tool requests (spade-reference.md §8).

isolation.worker_source() puts this text in place of worker.py's import line for it, so the class lives in the
sandbox worker itself and is injected into every environment's namespace (a design must not import it). Standard
library only; every name here is prefixed so that it cannot clash with the worker's own.

A subclass's `reset(seed)` sets:
- `self._state`: a dict, the mutable backend the tools read and write;
- `self._tools`: {name: {"description": str, "parameters": JSON schema of an object}} (OpenAI function calling),
  each implemented by a method `tool_<name>(**arguments) -> str`, deterministic given the state;
- `self._user_messages`: 3-5 instructions revealed one at a time; `self._message_criteria`: one callable per
  instruction, state -> bool, true once the instruction is carried out;
- `self._current_msg = 0` and `self._expected_answer` (default "done");
and returns the first instruction. After every tool call the base class advances past each satisfied instruction
and appends "[STEP n COMPLETE - NEW INSTRUCTION] ..." or "[ALL STEPS COMPLETE] ..." to the tool's result.
`step(action)` takes the agent's final `<answer>...</answer>`: reward 1.0 and terminated when every instruction is
done and the answer matches; a reply with neither an answer nor a tool call is a format error (-0.1).
`solution()` returns the tool-call plan: a list of {"name", "arguments"} dicts or (name, arguments) pairs and
finally the answer string; the worker turns it into the replies a scripted agent would send.
"""

import json as _tool_json
import random as _tool_random
import re as _tool_re

TOOL_ANSWER = _tool_re.compile(r"<answer>(.*?)</answer>", _tool_re.DOTALL | _tool_re.IGNORECASE)
TOOL_RESULT_CHARS = 4000  # a tool result longer than this (or the request's max_chars) is cut, with a note
TOOL_FORMAT_ERROR = ("Format error: call a tool as <tool_call>{\"name\": \"TOOL\", \"arguments\": {...}}</tool_call> "
                     "or give the final answer as <answer>...</answer>.")


class ToolUseBaseEnv:
    """Base class of tool-use environments: subclasses define reset() and tool_<name> methods."""

    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns
        self.turn_count = 0
        self.reset()

    def reset(self, seed=None):
        self.rng = _tool_random.Random(seed)
        self.turn_count = 0
        self._state, self._tools, self._user_messages, self._message_criteria = {}, {}, [], []
        self._current_msg, self._expected_answer = 0, "done"
        return "", {}

    # ------------------------------------------------------------------ progress
    def _criterion_met(self, index):
        try:
            return bool(self._message_criteria[index](self._state))
        except Exception:  # noqa: BLE001 - a criterion that raises is not met
            return False

    def _all_done(self):
        return self._current_msg >= len(self._user_messages)

    def _advance_if_done(self):
        """Move past every satisfied instruction; the progress note to append to a tool result ("" if none)."""
        note = ""
        while not self._all_done() and self._current_msg < len(self._message_criteria) \
                and self._criterion_met(self._current_msg):
            self._current_msg += 1
            if self._all_done():
                note = (f"\n\n[ALL STEPS COMPLETE] Submit <answer>{self._expected_answer}</answer>")
            else:
                note = (f"\n\n[STEP {self._current_msg} COMPLETE - NEW INSTRUCTION] "
                        f"{self._user_messages[self._current_msg]}")
        return note

    # ------------------------------------------------------------------ tools
    def get_tools(self):
        """The tool specs in OpenAI function-calling form."""
        return [{"type": "function", "function": {"name": name, "description": spec.get("description", ""),
                                                  "parameters": spec.get("parameters", {})}}
                for name, spec in self._tools.items()]

    def execute_tool(self, name, arguments):
        """Run one tool call; unknown tools, bad arguments and exceptions come back as error text."""
        if not isinstance(name, str) or name not in self._tools:
            return f"Error: unknown tool {name!r}. Available tools: {', '.join(self._tools)}"
        method = getattr(self, "tool_" + name, None)
        if not callable(method):
            return f"Error: tool {name!r} is not implemented"
        if not isinstance(arguments, dict):
            return f"Error: the arguments of {name} must be a JSON object"
        try:
            result = method(**arguments)
        except (MemoryError, RecursionError):
            raise  # a limit: the sandbox fails the play
        except TypeError as exc:
            return f"Error: bad arguments for {name}: {exc}"
        except Exception as exc:  # noqa: BLE001 - the tool's own error, shown to the agent
            return f"Error: {type(exc).__name__}: {exc}"
        text = result if isinstance(result, str) else _tool_json.dumps(result, default=str)
        if "[STEP " not in text and "[ALL STEPS COMPLETE]" not in text:
            text += self._advance_if_done()
        return text

    # ------------------------------------------------------------------ the answer
    def _check_answer(self, answer):
        return self._all_done() and answer.strip().lower() == str(self._expected_answer).strip().lower()

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        found = TOOL_ANSWER.findall(action)
        if not found:
            return TOOL_FORMAT_ERROR, -0.1, False, truncated, {}
        if self._check_answer(found[-1]):
            return "Correct: every instruction is complete.", 1.0, True, False, {}
        if not self._all_done():
            return (f"Not finished: instruction {self._current_msg + 1} is not complete yet: "
                    f"{self._user_messages[self._current_msg]}"), 0.0, False, truncated, {}
        return f"Wrong answer. Submit <answer>{self._expected_answer}</answer>", 0.0, False, truncated, {}

    def close(self):
        pass


def tool_plan_replies(plan):
    """A solution() plan as the replies a scripted agent sends: tool calls in the JSON form, then the answer."""
    if isinstance(plan, str):
        plan = [plan]
    if not isinstance(plan, (list, tuple)):
        raise TypeError(f"solution() must return a list of tool calls and the answer, got {type(plan).__name__}")
    replies = []
    for item in plan:
        if isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str):
            item = {"name": item[0], "arguments": item[1]}
        if isinstance(item, dict):
            call = {"name": item.get("name"), "arguments": item.get("arguments", item.get("parameters", {}))}
            replies.append("<tool_call>\n" + _tool_json.dumps(call) + "\n</tool_call>")
        elif isinstance(item, str):
            replies.append(item if "<answer>" in item or "<tool_call>" in item else f"<answer>{item}</answer>")
        else:
            raise TypeError(f"solution() step must be a dict, a (name, arguments) pair or str, got {type(item).__name__}")
    return replies


def _tool_jsonable(value, depth=0):
    """Specs as plain JSON data (anything else becomes its repr), so the reply always encodes."""
    if depth > 12:
        return "..."
    if isinstance(value, dict):
        return {str(k): _tool_jsonable(v, depth + 1) for k, v in list(value.items())[:200]}
    if isinstance(value, (list, tuple)):
        return [_tool_jsonable(v, depth + 1) for v in list(value)[:200]]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else repr(value)
    return repr(value)[:200]


def tool_request(env, request):
    """The worker's `call_tool` and `inspect_tools` requests on the loaded environment."""
    if not isinstance(env, ToolUseBaseEnv):
        return {"type": "failed", "kind": "protocol", "detail": "the environment is not a ToolUseBaseEnv"}
    if request.get("op") == "call_tool":
        result = env.execute_tool(request["name"], request["arguments"])
        if not isinstance(result, str):
            result = repr(result)
        limit = min(int(request.get("max_chars") or TOOL_RESULT_CHARS), 1 << 20)
        if len(result) > limit:
            result = result[:limit] + f"\n[result cut at {limit} of {len(result)} characters]"
        return {"type": "tool", "result": result}
    tools = getattr(env, "_tools", None)
    messages = getattr(env, "_user_messages", None)
    criteria = getattr(env, "_message_criteria", None)
    met = []
    for check in criteria if isinstance(criteria, (list, tuple)) else []:
        try:
            met.append("true" if bool(check(env._state)) else "false")
        except Exception as exc:  # noqa: BLE001 - reported: the validator decides
            met.append(f"error: {type(exc).__name__}: {exc}"[:300])
    return {"type": "inspected", "tools": _tool_jsonable(tools) if isinstance(tools, dict) else None,
            "messages": [str(m)[:2000] for m in messages] if isinstance(messages, (list, tuple)) else None,
            "criteria": met, "current": env._current_msg if isinstance(getattr(env, "_current_msg", None), int) else -1,
            "has_state": isinstance(getattr(env, "_state", None), dict),
            "expected_answer": str(getattr(env, "_expected_answer", "done"))[:200]}
