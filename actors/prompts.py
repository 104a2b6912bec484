"""The prompts of the three roles (written for this project; the structure follows spade-reference.md §2, §3, §5)."""

from __future__ import annotations

from engine.messages import DesignTask

DESIGNER_SYSTEM = (
    "You design interactive, multi-turn text games as Python programs. Each game is a complete environment "
    "with a hidden state that a player explores turn by turn. You write correct, self-contained code."
)

ENVIRONMENT_SPEC = """Requirements for the environment:
- Exactly one class whose name ends in `Env`. Standard library only (math, random, re, itertools, collections,
  string, json, dataclasses, typing, fractions, heapq, functools).
- `__init__(self, max_turns=12, **kwargs)` stores max_turns and calls `self.reset()`.
- `reset(self, seed=None)` draws all randomness from `random.Random(seed)` and returns `(observation, {})`.
- `step(self, action)` reads the player's command from the first `\\boxed{...}` in `action`, updates the hidden
  state and returns `(observation, reward, terminated, truncated, {})`: reward 1.0 and terminated=True when the
  goal is reached, 0.0 otherwise; `truncated = self.turn_count >= self.max_turns`.
- Every observation is a string that describes what the player sees, lists the available actions and reminds
  the player to answer as \\boxed{...}. A malformed action must not raise: explain the format instead.
- `solution(self)` returns the list of actions that wins the current episode.
- Winning must need at least 3 interaction steps."""

HINT_SYSTEM = (
    "You write a short hint for a player of a text game, given the game's code. In 1-3 sentences (under 100 "
    "words) state the key insight and the expected answer format. Do not reveal the exact answer. Refer only "
    "to what the player can see."
)

AGENT_FIRST_TURN = (
    "You are playing a language game. Make valid actions to win.\nObservation: {observation}\n"
    "Please reason step by step, and put your final answer within \\boxed{{}}."
)

HINT_INJECTION = "{observation}\n\nHINT: {hint}"


def designer_user_message(task: DesignTask) -> str:
    parts = [
        "Create an INTERACTIVE, MULTI-TURN Python game grounded in a concept from this document.",
        f"<REFERENCE_DOCUMENT>\n{task.passage}\n</REFERENCE_DOCUMENT>",
        ENVIRONMENT_SPEC,
    ]
    if task.examples:
        lines = [
            "<REFERENCE_ENVIRONMENTS>",
            "These environments had good difficulty calibration. Create a DIFFERENT game in the same format.",
        ]
        for i, example in enumerate(task.examples, 1):
            lines.append(
                f"### Example {i} ({example.skill}, win_rate={example.win_rate:.2f}, regret={example.regret:.2f})\n"
                f"```python\n{example.code}\n```"
            )
        lines.append("</REFERENCE_ENVIRONMENTS>")
        parts.append("\n".join(lines))
    if task.negatives:
        parts.append("Avoid generating environments like:\n" + "\n".join(f"- {line}" for line in task.negatives))
    parts.append(
        f"Target skill: {task.skill} ({task.skill_description}). DIFFICULTY: medium - the goal should need 3+ "
        "interaction steps.\nGenerate the complete Python code in a ```python block."
    )
    return "\n\n".join(parts)



def hint_user_message(code: str) -> str:
    return f"Environment code:\n```python\n{code}\n```"


def agent_first_message(observation: str, hint: str) -> str:
    if hint:
        observation = HINT_INJECTION.format(observation=observation, hint=hint)
    return AGENT_FIRST_TURN.format(observation=observation)
