import pytest

from engine.config import ConfigError, dump_config, load_config, read_config_file


def test_defaults_and_overrides():
    config = load_config(overrides=["run.steps=7", "play.agent_temperature=0.9", "model.path=/some/where"])
    assert config.run.steps == 7
    assert config.play.agent_temperature == 0.9
    assert config.model.path == "/some/where"


def test_paper_preset_has_the_paper_schedule():
    config = load_config("paper")
    assert (config.curriculum.envs_per_step, config.play.plays_per_env, config.play.hint_plays_per_env) == (24, 8, 16)
    assert (config.curriculum.refresh_interval, config.play.max_turns) == (4, 25)


def test_round_trip_through_toml(tmp_path):
    config = load_config(overrides=["run.steps=5"])
    path = tmp_path / "config.toml"
    path.write_text(dump_config(config))
    assert read_config_file(path) == config


@pytest.mark.parametrize(
    "override, message",
    [
        ("run.stepz=1", r"^unknown config key run\.stepz \(known in \[run\]: steps, .*\)$"),
        ("runn.steps=1", r"^unknown config section 'runn' \(known: run, .*\)$"),
        ('run.steps="three"', r"^bad config value: Expected `int`, got `str` - at `run\.steps`$"),
        ("play.max_turns=0", r"^play\.max_turns must be at least 1 \(got 0\)$"),
        ("steps", r"^--set 'steps': expected section\.key=value"),
        ("reward.designer_reward=best", r"^bad config value: Invalid enum value 'best' - at `reward\.designer_reward`$"),
    ],
)
def test_bad_input_names_the_field(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=[override])


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match=r"does not exist$"):
        load_config(toml_path=str(tmp_path / "nope.toml"))
