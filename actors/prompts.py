"""The prompts of the three roles (written for this project; the structure follows spade-reference.md §2, §3, §5)."""

from __future__ import annotations

import random
import zlib

from engine.protocol.messages import DesignTask

DESIGNER_SYSTEM = (
    "You design interactive, multi-turn text games as Python programs. Each game is a complete environment "
    "with a hidden state that a player explores turn by turn. You write correct, self-contained code."
)

_SPEC = """Requirements for the environment:
- Exactly one class whose name ends in `Env`. Standard library only (math, random, re, itertools, collections,
  string, json, dataclasses, typing, fractions, heapq, functools).
- `__init__(self, max_turns=12, **kwargs)` stores max_turns and calls `self.reset()`.
- `reset(self, seed=None)` draws all randomness from `random.Random(seed)` and returns `(observation, {})`.
- `step(self, action)` reads the player's command from the first `\\boxed{...}` in `action`, updates the hidden
  state and returns `(observation, reward, terminated, truncated, {})` with `truncated = self.turn_count >=
  self.max_turns`. Rewards: {rewards}.
- Every observation is a string that describes what the player sees, lists the available actions and reminds
  the player to answer as \\boxed{...}. A malformed action must not raise: explain the format instead.
- `solution(self)` returns the list of actions that wins the current episode.
- {steps}"""
_BINARY_REWARDS = "reward 1.0 and terminated=True when the goal is reached, 0.0 otherwise"
_PARTIAL_REWARDS = ("reward 1.0 and terminated=True when the goal is reached; a reward in [0, 1] may credit partial "
                    "progress (only the reward of the final step counts)")


_STEPS = "Winning must need at least 3 interaction steps."
# Below this many turns a play (`play.max_turns`) cannot hold a game of 3+ steps: the spec asks for a short one.
SHORT_GAME_TURNS = 6
_SHORT_STEPS = "The player has only {turns} turns: winning must be possible in {turns} steps or fewer, and a random guess must not always win."


def environment_spec(partial_rewards: bool = True, play_turns: int = 25) -> str:
    """The environment contract the designer is given; `partial_rewards` (`play.partial_rewards`, the reference)
    allows partial-progress rewards in [0, 1], else rewards are exactly 1.0 or 0.0; with `play_turns` (the training
    plays' `play.max_turns`) below SHORT_GAME_TURNS the game must fit them (the reference: 3+ steps, 25 turns)."""
    steps = _SHORT_STEPS.format(turns=play_turns) if play_turns < SHORT_GAME_TURNS else _STEPS
    return _SPEC.replace("{rewards}", _PARTIAL_REWARDS if partial_rewards else _BINARY_REWARDS).replace("{steps}", steps)


ENVIRONMENT_SPEC = environment_spec(False)

# The no-corpus ablation's cold-start prompt (the designer gets no passage): game ideas per skill, three drawn per
# design, and what makes a multi-turn game good. Written for this project.
CONCEPT_IDEAS = {
    "Mathematical Reasoning": ("a hidden linear equation probed by plugging in values", "a budget ledger whose missing "
                               "entry must be derived", "a number lock opened by modular clues", "a sequence of "
                               "operations that must reach a target value"),
    "Logical Deduction": ("a suspect lineup narrowed by yes/no questions", "a seating chart fixed by constraints revealed "
                          "on request", "a truth-teller and liar island", "a circuit of switches whose rules are learned "
                          "by toggling"),
    "Spatial Reasoning": ("a dark maze mapped by moving and sensing walls", "a sliding tile board with a goal layout",
                          "a robot on a grid with rotating commands", "locating a hidden object from distance readings"),
    "Pattern Recognition": ("a hidden rule that accepts or rejects proposed sequences", "a cipher learned from encoded "
                            "samples", "the next term of a sequence revealed one term at a time", "an odd-one-out set "
                            "with a secret property"),
    "Optimization": ("packing items of hidden weights into a limited bag", "routing deliveries under a fuel budget",
                     "a schedule of jobs with deadlines revealed by probing", "a market with changing prices to buy "
                     "low and sell high"),
    "Causal Inference": ("a machine whose hidden wiring links buttons to lights", "a garden where hidden factors make "
                         "plants grow", "a chain of dominoes whose links are found by intervening", "a medicine trial "
                         "where treatments are tested one at a time"),
}
_COLD_START_DESIGN = """A good multi-turn game: hidden state the player uncovers by acting; each observation says what changed
and which actions are available; optimal play wins in roughly {low}-{high} turns; a lucky guess or a single action
cannot win. Avoid: games won in one step, answers shown in the first observation, observations that do not change,
rules the player can never discover."""


def _concepts(task: DesignTask) -> list[str]:
    ideas = list(CONCEPT_IDEAS.get(task.skill, ()))
    random.Random(zlib.crc32(task.task_id.encode())).shuffle(ideas)
    return ideas[:3]


HINT_SYSTEM = (
    "You write a short hint for a player of a text game, given the game's code. In 1-3 sentences (under 100 "
    "words) state the key insight and the expected answer format. Do not reveal the exact answer. Refer only "
    "to what the player can see."
)

AGENT_FIRST_TURN = (
    "You are playing a language game. Make valid actions to win.\nObservation: {observation}\n"
    "Please reason step by step, and put your final answer within \\boxed{{}}."
)

# `play.agent_prompt = "answer"`: for short turns (the default's 48 tokens), where reasoning never reaches an answer
AGENT_FIRST_TURN_ANSWER = (
    "You are playing a language game. Make valid actions to win.\nObservation: {observation}\n"
    "Reply with your action only, in \\boxed{{}}."
)

HINT_INJECTION = "{observation}\n\nHINT: {hint}"


def designer_user_message(task: DesignTask, *, partial_rewards: bool = True, max_turns: int = 25, play_turns: int = 25) -> str:
    """The designer's request: grounded on the task's passage, or (no passage: the no-corpus ablation) the cold-start
    prompt with concept ideas for its skill and turns to winning of about max_turns // 2 to 3 * max_turns // 4;
    `play_turns` (`play.max_turns`): see environment_spec."""
    if task.passage:
        parts = [
            "Create an INTERACTIVE, MULTI-TURN Python game grounded in a concept from this document.",
            f"<REFERENCE_DOCUMENT>\n{task.passage}\n</REFERENCE_DOCUMENT>",
        ]
    else:
        ideas = "\n".join(f"- {idea}" for idea in _concepts(task))
        parts = [
            f"Create an INTERACTIVE, MULTI-TURN Python game that trains {task.skill}. Ideas to start from:\n{ideas}",
            _COLD_START_DESIGN.format(low=max_turns // 2, high=3 * max_turns // 4),
        ]
    parts.append(environment_spec(partial_rewards, play_turns))
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
    difficulty = "the goal should need 3+ interaction steps" if play_turns >= SHORT_GAME_TURNS else f"winnable in {play_turns} steps"
    parts.append(
        f"Target skill: {task.skill} ({task.skill_description}). DIFFICULTY: medium - {difficulty}.\n"
        "Generate the complete Python code in a ```python block."
    )
    return "\n\n".join(parts)



# The edit task (`curriculum.edit_share`, beyond the reference; ACCEL edits levels in the same spirit): a remembered
# valid environment and one concrete change to make, drawn per task, so a small model copies what works and alters it.
EDITS = (
    "change the numbers: other ranges, sizes or targets",
    "make the instance smaller, so that it is easier to win",
    "make the instance larger, so that it is harder to win",
    "change one rule of the game (what an action does, or when the player wins)",
    "change the story and the names of the things in it, keeping the rules",
)


def edit_choice(task: DesignTask) -> str:
    """The change an edit task asks for, fixed by its task id (a retry with a new attempt may draw another)."""
    return EDITS[zlib.crc32(task.task_id.encode()) % len(EDITS)]


def edit_user_message(task: DesignTask) -> str:
    """The designer's request in an edit task: write a variant of `task.parent` (a remembered valid environment).
    No spec: the parent is the worked example of it, and a short prompt is what a small model follows best."""
    parent = task.parent
    return "\n\n".join([
        f"Here is a working game that trains {task.skill} (win_rate={parent.win_rate:.2f}):\n```python\n{parent.code}\n```",
        f"Write a VARIANT of this game: {edit_choice(task)}. Give the class a new name ending in `Env`. Keep "
        "everything else that works: the same methods, the same \\boxed{...} actions and a correct solution().\n"
        "Generate the complete Python code in a ```python block.",
    ])


NUMBER_EDITS = ("other numbers", "a smaller instance, easier to win", "a larger instance, harder to win")
NUMBERS_PREFILL = "\\boxed{"  # the start of a number edit's reply: the designer writes the list from there


def edit_numbers_message(task: DesignTask, values: list[int]) -> str:
    """The designer's request in a number edit: new values for the parent's integer constants (actors/edits.py)."""
    parent = task.parent
    change = NUMBER_EDITS[zlib.crc32(task.task_id.encode()) % len(NUMBER_EDITS)]
    listed = ", ".join(str(v) for v in values)
    return (
        f"Here is a working game that trains {task.skill} (win_rate={parent.win_rate:.2f}):\n```python\n{parent.code}\n```\n\n"
        # (measured on SmolLM2-135M: without the old list as the example of the format it writes no numbers at all)
        f"Its numbers, in order: {listed}.\nMake a variant with {change}: write {len(values)} new numbers in the same "
        f"order, comma-separated, in \\boxed{{...}}, like \\boxed{{{listed}}} with yours."
    )


def hint_user_message(code: str) -> str:
    return f"Environment code:\n```python\n{code}\n```"


def agent_first_message(observation: str, hint: str, style: str = "reason") -> str:
    """The agent's first turn around the first observation (and the hint); `style` is `play.agent_prompt`."""
    if hint:
        observation = HINT_INJECTION.format(observation=observation, hint=hint)
    return (AGENT_FIRST_TURN_ANSWER if style == "answer" else AGENT_FIRST_TURN).format(observation=observation)
