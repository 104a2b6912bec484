"""The tool-use setting's designer and hint prompts (written for this project; the contract is spade-reference.md §8).

Each design draws one realistic domain and one task variant from the task id (execute 3 : read-then-write 2 :
missing parameter 1 : irrelevant request to decline 1, the reference's weights); the corpus passage, when there is
one, is optional flavour only.
"""

from __future__ import annotations

import random
import zlib

from engine.protocol.messages import DesignTask

DESIGNER_SYSTEM = (
    "You design tool-use environments as Python programs: a simulated backend with a mutable state, the tools (APIs) "
    "an assistant may call on it, and a user's instructions revealed one at a time. You write correct, deterministic, "
    "self-contained code."
)

HINT_SYSTEM = (
    "You write a short procedural plan for an assistant that must carry out a user's instructions with tools, given "
    "the environment's code. In 2-3 sentences give the phases in order: which tool to call in each phase and what "
    "its result feeds into the next call. Use placeholders such as ACCOUNT or AMOUNT, never concrete values, and end "
    "with how to answer."
)

DOMAINS = (
    "calendar and meeting scheduling", "personal banking", "warehouse inventory", "travel booking",
    "restaurant reservations", "e-commerce orders and returns", "customer support tickets", "smart home devices",
    "a library's loans and holds", "a clinic's appointments and prescriptions",
)
VARIANTS = {
    "execute": "each instruction is carried out by calling the right tools with values stated in the instruction",
    "read_then_write": "an instruction needs a value that must first be read with one tool (a balance, an id, a "
                       "price) and then used in a write call",
    "miss_param": "one instruction leaves out a required parameter (an id, a location) that the agent must look up "
                  "with another tool before it can act",
    "irrelevant": "one instruction asks for something no tool can do; the environment has a `decline_request(reason)` "
                  "tool and that instruction's state check is that it was called",
}
VARIANT_WEIGHTS = (("execute", 3), ("read_then_write", 2), ("miss_param", 1), ("irrelevant", 1))

SPEC = """Requirements for the environment:
- Exactly one class whose name ends in `Env`, deriving from `ToolUseBaseEnv`. The sandbox provides that base class:
  do NOT import or define it. Standard library only (math, random, re, itertools, collections, string, json).
- `__init__(self, max_turns=25, **kwargs)` calls `super().__init__(max_turns=max_turns, **kwargs)`.
- `reset(self, seed=None)` first calls `super().reset(seed)` (which sets `self.rng = random.Random(seed)`; draw all
  randomness from it), then sets:
  - `self._state`: a dict, the backend's mutable state;
  - `self._tools`: 3-8 tools, {name: {"description": str, "parameters": {"type": "object", "properties": {...},
    "required": [...]}}} (OpenAI function-calling JSON schemas; at least one parameter has an "enum"); one or two of
    the tools are plausible distractors the task never needs;
  - `self._user_messages`: 3-5 short instructions, revealed to the agent one at a time;
  - `self._message_criteria`: one function per instruction, `lambda s: ...` on the state, true once it is done;
  - `self._current_msg = 0` and `self._expected_answer = "done"`;
  and returns `(self._user_messages[0], {})`.
- Each tool is a method `tool_<name>(self, **arguments) -> str` that reads or changes `self._state`, deterministic
  given the state, and returns a short text result (raise ValueError for a bad argument; the agent sees the error).
  Do not call `_advance_if_done` yourself and do not write `step`: the base class reveals the next instruction after
  each tool call and scores the final `<answer>done</answer>`.
- No instruction may already hold at reset.
- `solution(self)` returns the plan that completes the current episode: a list of
  `("tool_name", {"arg": value})` pairs in order, then the string "done"."""

EXAMPLE = '''class ShopEnv(ToolUseBaseEnv):
    def __init__(self, max_turns=25, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)

    def reset(self, seed=None):
        super().reset(seed)
        price = self.rng.randint(5, 50)
        self._state = {"cart": [], "prices": {"pen": price, "ink": 3}}
        self._tools = {
            "get_price": {"description": "Price of an item.", "parameters": {"type": "object",
                "properties": {"item": {"type": "string", "enum": ["pen", "ink"]}}, "required": ["item"]}},
            "add_to_cart": {"description": "Add an item.", "parameters": {"type": "object",
                "properties": {"item": {"type": "string"}, "qty": {"type": "integer"}}, "required": ["item", "qty"]}},
            "get_weather": {"description": "Weather in a city.", "parameters": {"type": "object",
                "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        }
        self._user_messages = ["How much is a pen?", "Put two pens in my cart.", "Add one ink too."]
        self._message_criteria = [lambda s: s.get("asked") == "pen", lambda s: ["pen", 2] in s["cart"],
                                  lambda s: ["ink", 1] in s["cart"]]
        self._current_msg, self._expected_answer = 0, "done"
        return self._user_messages[0], {}

    def tool_get_price(self, item):
        self._state["asked"] = item
        return f"{item}: ${self._state['prices'][item]}"

    def tool_add_to_cart(self, item, qty):
        self._state["cart"].append([item, int(qty)])
        return f"added {int(qty)} x {item}"

    def tool_get_weather(self, city):
        return "sunny"

    def solution(self):
        return [("get_price", {"item": "pen"}), ("add_to_cart", {"item": "pen", "qty": 2}),
                ("add_to_cart", {"item": "ink", "qty": 1}), "done"]'''


def draw(task: DesignTask) -> tuple[str, str]:
    """The design's domain and task variant, fixed by its task id."""
    rng = random.Random(zlib.crc32(f"tool-use:{task.task_id}".encode()))
    variants = [name for name, weight in VARIANT_WEIGHTS for _ in range(weight)]
    return rng.choice(DOMAINS), rng.choice(variants)


def designer_user_message(task: DesignTask) -> str:
    domain, variant = draw(task)
    parts = [f"Create a multi-turn TOOL-USE environment in the domain of {domain}. Task variant: {variant}: "
             f"{VARIANTS[variant]}."]
    if task.passage:
        parts.append(f"Optional flavour (use it only if it fits the domain):\n<REFERENCE_DOCUMENT>\n{task.passage}\n"
                     "</REFERENCE_DOCUMENT>")
    parts.append(SPEC)
    parts.append(f"A minimal example of the format (write a richer, different one):\n```python\n{EXAMPLE}\n```")
    if task.examples:
        lines = ["<REFERENCE_ENVIRONMENTS>", "These environments had good difficulty calibration. Create a DIFFERENT one."]
        for i, example in enumerate(task.examples, 1):
            lines.append(f"### Example {i} ({example.skill}, win_rate={example.win_rate:.2f}, regret={example.regret:.2f})\n"
                         f"```python\n{example.code}\n```")
        lines.append("</REFERENCE_ENVIRONMENTS>")
        parts.append("\n".join(lines))
    if task.negatives:
        parts.append("Avoid generating environments like:\n" + "\n".join(f"- {line}" for line in task.negatives))
    parts.append(f"Target skill: {task.skill} ({task.skill_description}).\n"
                 "Generate the complete Python code in a ```python block.")
    return "\n\n".join(parts)
