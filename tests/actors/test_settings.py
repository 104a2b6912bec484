"""The settings registry (actors/settings.py): which setting plays a task, validates a design and prompts the
designer, told apart in one place."""

from actors import prompts, settings
from actors.tool_use import prompts as tool_prompts
from engine.protocol.messages import DesignTask, PlayTask, ReasoningGymTask, encode_reasoning_gym_task
from engine.protocol.paths import TOOL_USE_SEEDS_DIR


def _play(code: str, setting: str = "games") -> PlayTask:
    return PlayTask(task_id="t", env_id="e", skill="s", code=code, hint="", arm="no_hint", seed=0, step=0, setting=setting)


def test_a_play_task_goes_to_its_setting_and_a_reasoning_gym_problem_to_its_own():
    assert settings.for_play(_play("class AEnv: ...")) is settings.GAMES
    assert settings.for_play(_play("class AEnv: ...", "tool_use")) is settings.TOOL_USE
    problem = encode_reasoning_gym_task(ReasoningGymTask(dataset="chain_sum"))
    assert settings.for_play(_play(problem)) is settings.REASONING_GYM


def test_a_design_is_validated_by_what_its_source_is():
    assert settings.for_source((TOOL_USE_SEEDS_DIR / "banking.py").read_text()) is settings.TOOL_USE
    assert settings.for_source("class GuessEnv:\n    pass\n") is settings.GAMES


def test_each_designed_setting_has_its_prompts_and_validator():
    task = DesignTask(task_id="d", skill="Data Retrieval", skill_description="looking up facts", passage_id="p",
                      passage="text", examples=[], negatives=[], attempt=0, step=0, setting="tool_use")
    assert settings.SETTINGS["tool_use"].designer_system == tool_prompts.DESIGNER_SYSTEM
    assert settings.SETTINGS["games"].hint_system == prompts.HINT_SYSTEM
    assert settings.TOOL_USE.design_prompt(task, None, 25) == tool_prompts.designer_user_message(task)
    assert all(s.design_prompt and s.validate for s in settings.SETTINGS.values())
    assert settings.REASONING_GYM.validate is None  # no designs: its problems come from the RLVE curriculum
