"""The settings a worker plays, as objects: the designer's prompts, the episode runner and the validator of each.

    for_play(task).play(task, batcher=..., pool=..., tokenizer=..., play_config=..., worker_id=...)   # actors/worker.py
    SETTINGS[task.setting].designer_system, .design_prompt(task, play_config, max_turns), .hint_system  # actors/designer.py
    await validate_environment(pool, source, hint=..., max_turns=..., seeds=..., quality_checks=...)  # its validator

- games: text games over `reset`/`step` (actors/agent.py, actors/prompts.py, actors/sandbox/validator.py);
- tool_use: tool APIs over `ToolUseBaseEnv` (actors/tool_use/);
- reasoning_gym: a Reasoning-Gym problem in a PlayTask (the RLVE baseline's plays and the in-loop rg-hard
  evaluation, actors/reasoning_gym/play.py): no designer, no sandbox.
The wire names the first two in `setting`; a Reasoning-Gym problem is a PlayTask whose code carries
REASONING_GYM_PREFIX (engine/protocol/messages.py), and a design is tool use when its source derives from
ToolUseBaseEnv, whatever the task said: `for_play` and `for_source` are the one place each is told apart.
The runners and validators are imported when first called (they import the sandbox and torch's backends).
`validate_environment(pool, source, ...)`: a design checked by its setting's validator (the designer, the
revalidation and `spade-engine validate` call it); the sandbox itself knows no setting.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from actors import prompts
from actors.tool_use import is_tool_use_source
from actors.tool_use import prompts as tool_prompts
from engine.protocol.messages import REASONING_GYM_PREFIX, DesignTask, PlayTask


@dataclass(frozen=True)
class Setting:
    name: str
    play: Callable[..., Awaitable]  # (task, *, batcher, pool, tokenizer, play_config, worker_id) -> PlayResult
    designer_system: str = ""
    hint_system: str = ""
    design_prompt: Callable[[DesignTask, object, int], str] | None = None  # a fresh design's user message
    validate: Callable[..., Awaitable] | None = None  # (pool, source, *, hint, max_turns, seeds, quality_checks) -> Verdict


async def _play_game(task, **common):
    from actors.agent import play_game_episode

    return await play_game_episode(task, **common)


async def _play_tools(task, **common):
    from actors.tool_use.agent import play_tool_episode

    return await play_tool_episode(task, **common)


async def _play_reasoning_gym(task, **common):
    from actors.reasoning_gym.play import play_reasoning_gym

    return await play_reasoning_gym(task, **common)


def _game_prompt(task: DesignTask, play_config, max_turns: int) -> str:
    return prompts.designer_user_message(task, partial_rewards=play_config.partial_rewards, max_turns=max_turns,
                                         play_turns=play_config.max_turns)


def _tool_prompt(task: DesignTask, play_config, max_turns: int) -> str:
    return tool_prompts.designer_user_message(task)  # a tool-use episode has its own turn budget


async def _validate_game(pool, source, *, hint, max_turns, seeds, quality_checks):
    from actors.sandbox.validator import validate_game

    return await validate_game(pool, source, hint=hint, max_turns=max_turns, seeds=seeds, quality_checks=quality_checks)


async def _validate_tools(pool, source, *, hint, max_turns, seeds, quality_checks):
    from actors.tool_use.validator import validate_tool_use

    return await validate_tool_use(pool, source, hint=hint, seeds=seeds, quality_checks=quality_checks)


GAMES = Setting("games", _play_game, prompts.DESIGNER_SYSTEM, prompts.HINT_SYSTEM, _game_prompt, _validate_game)
TOOL_USE = Setting("tool_use", _play_tools, tool_prompts.DESIGNER_SYSTEM, tool_prompts.HINT_SYSTEM, _tool_prompt,
                   _validate_tools)
REASONING_GYM = Setting("reasoning_gym", _play_reasoning_gym)
SETTINGS = {setting.name: setting for setting in (GAMES, TOOL_USE)}  # by the wire's `setting`


def for_play(task: PlayTask) -> Setting:
    """Who plays `task`: a Reasoning-Gym problem, else its setting's episode runner."""
    return REASONING_GYM if task.code.startswith(REASONING_GYM_PREFIX) else SETTINGS[task.setting]


def for_source(source: str) -> Setting:
    """Whose validator checks the design `source`: tool use for a ToolUseBaseEnv subclass, else a game."""
    return TOOL_USE if is_tool_use_source(source) else GAMES


async def validate_environment(pool, source: str, *, hint: str | None = None, max_turns: int = 25,
                               seeds: tuple[int, ...] = (0, 1, 2), quality_checks: bool = True):
    """Check a design statically, then by playing it in `pool`, with its setting's validator (`for_source`); a
    `Verdict` (actors/sandbox/validator.py). Never raises for a bad design. `quality_checks=False`: the project's
    quality filters report notes instead of rejecting."""
    seeds = tuple(seeds)
    if not seeds:
        raise ValueError("validate_environment needs at least one seed")
    return await for_source(source).validate(pool, source, hint=hint, max_turns=max_turns, seeds=seeds,
                                             quality_checks=quality_checks)
