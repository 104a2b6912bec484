import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from engine.protocol.config import Config, LearnerConfig, ObjectiveConfig
from engine.protocol.config_loading import (
    ConfigError,
    check_config,
    check_learner,
    dump_config,
    load_config,
    read_config_file,
)


def test_defaults_and_overrides():
    config = load_config(overrides=["run.steps=7", "play.agent_temperature=0.9", "model.path=/some/where"])
    assert config.run.steps == 7
    assert config.play.agent_temperature == 0.9
    assert config.model.path == "/some/where"


def test_paper_preset_has_the_paper_schedule():
    config = load_config("paper")
    assert (config.curriculum.envs_per_step, config.play.plays_per_env, config.play.hint_plays_per_env) == (24, 8, 16)
    assert (config.curriculum.refresh_interval, config.play.max_turns) == (4, 25)


def _resolved(config: Config, field: str):
    value = config
    for part in field.split("."):
        value = getattr(value, part)
    return value


# Where `paper` departs from REFERENCE on purpose; README's table "Where `paper` departs from the reference" says why
# (tests/test_readme.py holds the two together).
PAPER_DEPARTURES = {"curriculum.revalidate": True}


def test_paper_preset_resolves_to_the_reference_values():
    """engine/protocol/reference.py (spade-reference.md sections 1-9, the games launchers), field by field: prefill,
    timeouts and staleness included."""
    from engine.protocol.reference import REFERENCE

    config = load_config("paper")
    wrong = {}
    for field, (value, source) in REFERENCE.items():
        expected = PAPER_DEPARTURES.get(field, value)
        got = _resolved(config, field)
        if got != expected or type(got) is bool and type(expected) is not bool:
            wrong[field] = (got, expected, source)
    assert not wrong, f"--preset paper resolves to (got, REFERENCE value, source): {wrong}"
    assert (config.run.max_staleness, config.play.designer_prefill, config.sandbox.episode_timeout_s) == (0, "", 300.0)
    assert config.curriculum.revalidate and config.run.minutes == 0.0


def test_the_reference_table_names_real_fields_with_their_sources():
    from engine.protocol.reference import REFERENCE

    for field, (value, source) in REFERENCE.items():
        _resolved(Config(), field)  # an AttributeError names a field the config does not have
        assert source.startswith("§"), f"REFERENCE[{field!r}] needs its spade-reference.md section: {source!r}"
    assert set(PAPER_DEPARTURES) <= set(REFERENCE)


def test_every_reference_value_is_spelled_out_in_the_paper_preset():
    """A change of a default must not change the paper preset: every REFERENCE field is in PAPER itself."""
    from engine.protocol.presets import PAPER
    from engine.protocol.reference import REFERENCE

    def flat(data: dict, prefix: str = "") -> set[str]:
        return {name for key, value in data.items()
                for name in (flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key})}

    missing = sorted(set(REFERENCE) - flat(PAPER))
    assert not missing, f"REFERENCE fields the paper preset leaves to the defaults: {missing}"


def test_paper_async_is_paper_with_the_staleness_bound():
    paper, asynchronous = msgspec.to_builtins(load_config("paper")), msgspec.to_builtins(load_config("paper-async"))
    assert asynchronous["run"].pop("max_staleness") == 4 and paper["run"].pop("max_staleness") == 0
    assert asynchronous == paper
    assert load_config("paper-async,no-memory").curriculum.memory_positives == 0  # it combines like any preset


def test_presets_combine_left_to_right_and_every_ablation_is_an_overlay():
    from engine.protocol.presets import PRESETS

    assert set(PRESETS) >= {"default", "paper", "no-corpus", "no-memory", "frozen-designer", "solve-rate", "learning-progress", "two-skills", "fixed-envs"}
    both = load_config("paper,frozen-designer,no-memory")
    assert (both.curriculum.envs_per_step, both.reward.train_designer, both.curriculum.memory_positives, both.curriculum.memory_negatives) == (24, False, 0, 0)
    small = load_config("no-memory")
    assert small.curriculum.envs_per_step == load_config().curriculum.envs_per_step  # an ablation alone keeps the CPU size
    assert load_config("solve-rate").reward.regret_weight == 0.0 and load_config("solve-rate").reward.plateau_weight == 1.0
    assert load_config("two-skills").curriculum.skills == ["Mathematical Reasoning", "Pattern Recognition"]
    assert load_config("learning-progress").reward.designer_reward == "learning_progress"
    assert not load_config("no-corpus").curriculum.use_corpus and not load_config("fixed-envs").curriculum.design
    with pytest.raises(ConfigError, match=r"^unknown preset 'papr' \(known: default, paper, .*; combine them as paper,no-memory\)$"):
        load_config("paper,papr")
    with pytest.raises(ConfigError, match=r"^curriculum.fixed_envs is played only without a designer"):
        load_config(overrides=["curriculum.fixed_envs=/tmp"])


def test_up_help_lists_every_preset(monkeypatch):
    from engine.cli import build_parser
    from engine.protocol.presets import PRESETS

    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: no name is wrapped at its hyphen
    up = build_parser()._subparsers._group_actions[0].choices["up"]
    text = up.format_help()
    assert all(name in text for name in PRESETS), text


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
        ("play.edit_draws=0", r"^play\.edit_draws must be at least 1 \(got 0\)$"),
        ("play.edit_draws=17", r"^play\.edit_draws must be at most 16 \(got 17\)$"),
        ("steps", r"^--set 'steps': expected section\.key=value"),
        ("reward.designer_reward=best", r"^bad config value: Invalid enum value 'best' - at `reward\.designer_reward`$"),
        # every section is checked the same way, [eval] and [rlve] included
        ("eval.every=-1", r"^eval\.every must be >= 0 \(got -1\)$"),
        ("eval.episodes=0", r"^eval\.episodes must be at least 1 \(got 0\)$"),
        ("rlve.window=0", r"^rlve\.window must be at least 1 \(got 0\)$"),
        ("rlve.accuracy=1.5", r"^rlve\.accuracy must be in \(0, 1\] \(got 1\.5\)$"),
        ("curriculum.edit_share=-0.5", r"^curriculum\.edit_share must be in \[0, 1\] \(got -0\.5\)$"),
        ("worker.count=-1", r"^worker\.count must be >= 0 \(got -1\)$"),
        ("run.minutes=-1", r"^run\.minutes must be >= 0 \(got -1\.0\)$"),
    ],
)
def test_bad_input_names_the_field(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=[override])


def test_a_run_written_with_the_removed_log_every_turn_still_reads(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(dump_config(Config()).replace("[run]\n", "[run]\nlog_every_turn = false\n"))
    assert "log_every_turn" in path.read_text()
    assert read_config_file(path) == Config()
    with pytest.raises(ConfigError, match=r"^unknown config key run\.log_every_turn"):
        load_config(overrides=["run.log_every_turn=true"])  # a new run may not name it


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match=r"does not exist$"):
        load_config(toml_path=str(tmp_path / "nope.toml"))


# ---------------------------------------------------------------- [learner] and [learner.objective]

# Every learner range check, as the user writes the value: (overrides, the one-line message).
LEARNER_BAD = [
    (["learner.objective.clip_low=1.5"], r"^learner\.objective\.clip_low must be in \[0, 1\) \(got 1\.5\)$"),
    (["learner.objective.clip_low=-0.1"], r"^learner\.objective\.clip_low must be in \[0, 1\) \(got -0\.1\)$"),
    (["learner.objective.clip_high=-1.0"], r"^learner\.objective\.clip_high must be >= 0 \(got -1\.0\)$"),
    (["learner.objective.behaviour_cap=0.0"], r"^learner\.objective\.behaviour_cap must be > 0 \(got 0\.0\)$"),
    (["learner.objective.tis_cap=-2.0"], r"^learner\.objective\.tis_cap must be > 0 \(got -2\.0\)$"),
    (["learner.objective.icepop_low=-0.5"], r"^learner\.objective\.icepop_low must be >= 0 \(got -0\.5\)$"),
    (
        ["learner.objective.icepop_low=5.0", "learner.objective.icepop_high=0.5"],
        r"^learner\.objective\.icepop_low \(5\.0\) must not exceed learner\.objective\.icepop_high \(0\.5\)$",
    ),
    (["learner.objective.seq_low=0.0"], r"^learner\.objective\.seq_low must be > 0 \(got 0\.0\)$"),
    (
        ["learner.objective.seq_low=1.2", "learner.objective.seq_high=1.1"],
        r"^learner\.objective\.seq_low \(1\.2\) must not exceed learner\.objective\.seq_high \(1\.1\)$",
    ),
    (["learner.objective.kl_coef=-0.1"], r"^learner\.objective\.kl_coef must be >= 0 \(got -0\.1\)$"),
    (["learner.objective.name=gspo"], r"^bad config value: Invalid enum value 'gspo' - at `learner\.objective\.name`$"),
    (["learner.objective.clip_low=high"], r"^bad config value: Expected `float`, got `str` - at `learner\.objective\.clip_low`$"),
    (["learner.mini_batches=0"], r"^learner\.mini_batches must be at least 1 \(got 0\)$"),
    (["learner.micro_batch_tokens=0"], r"^learner\.micro_batch_tokens must be at least 1 \(got 0\)$"),
    (["learner.micro_batch_padding=1.5"], r"^learner\.micro_batch_padding must be in \[0, 1\] \(got 1\.5\)"),
    (["learner.world_size=0"], r"^learner\.world_size must be at least 1 \(got 0\)$"),
    (["learner.warmup_steps=-1"], r"^learner\.warmup_steps must be >= 0 \(got -1\)$"),
    (["learner.total_steps=-1"], r"^learner\.total_steps must be >= 0 \(got -1\)$"),
    (["learner.checkpoint_every=-1"], r"^learner\.checkpoint_every must be >= 0 \(got -1\)$"),
    (["learner.keep_checkpoints=-1"], r"^learner\.keep_checkpoints must be >= 0 \(got -1\)$"),
    (["learner.lora_rank=-1"], r"^learner\.lora_rank must be >= 0 \(got -1\)$"),
    (["worker.lease_factor=0.5"], r"^worker\.lease_factor must be at least 1 \(got 0\.5\): a shorter deadline"),
    (["worker.max_timeouts=-1"], r"^worker\.max_timeouts must be >= 0 \(got -1\)$"),
    (["worker.unread_heartbeats=2"], r"^worker\.unread_heartbeats must be 0 \(off\) or at least 3 \(got 2\)"),
    (["worker.message_burst=10"], r"^worker\.max_messages_per_s must be >= 0 \(0: no limit\) and worker\.message_burst at least 100"),
    (["worker.max_messages_per_s=-1"], r"^worker\.max_messages_per_s must be >= 0"),
    (
        ["learner.warmup_steps=4", "learner.total_steps=4"],
        r"^learner\.total_steps \(4\) must exceed learner\.warmup_steps \(4\), or be 0 for no decay$",
    ),
    (["learner.lora_rank=4", "learner.lora_targets=[]"], r"^learner\.lora_targets must name at least one module when learner\.lora_rank > 0$"),
    (["learner.lora_rank=16", "learner.world_size=2"], r"^learner\.lora_rank > 0 \(a LoRA adapter\) trains in one process, but learner\.world_size is 2: set learner\.lora_rank=0"),
    (["learner.lora_rank=16", 'learner.cpu_offload="on"'], r"^learner\.cpu_offload = \"on\" offloads full fine-tuning.s fp32 state, but learner\.lora_rank > 0"),
    (['learner.cpu_offload="yes"'], r"learner\.cpu_offload"),
    (["learner.lora_dropout=1.0"], r"^learner\.lora_dropout must be in \[0, 1\) \(got 1\.0\)$"),
    (["learner.betas=[0.9]"], r"^learner\.betas must be two numbers, for example \[0\.9, 0\.98\]$"),
]


@pytest.mark.parametrize("overrides, message", LEARNER_BAD, ids=[" ".join(o) for o, _ in LEARNER_BAD])
def test_bad_learner_value_names_the_dotted_field(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=overrides)


def test_hand_built_objective_is_checked_too():
    """msgspec checks `name` only on decoding: check_config names a bad one built in code."""
    config = Config(learner=LearnerConfig(objective=ObjectiveConfig(name="gspo")))
    with pytest.raises(ConfigError, match=r"^learner\.objective\.name must be one of decoupled_ppo, tis, icepop \(got 'gspo'\)$"):
        check_config(config)
    with pytest.raises(ConfigError, match=r"^learner\.objective\.clip_low must be in \[0, 1\) \(got 1\.5\)$"):
        check_learner(LearnerConfig(objective=ObjectiveConfig(clip_low=1.5)))
    check_config(Config())  # the defaults pass


OLD_FLAT = {
    "clip_low": "0.1", "clip_high": "0.3", "behaviour_cap": "4.0", "tis_cap": "3.0", "icepop_low": "0.4",
    "icepop_high": "4.0", "seq_filter": "true", "seq_low": "0.9", "seq_high": "1.1", "kl_coef": "0.1", "name": "tis",
}


@pytest.mark.parametrize("key", list(OLD_FLAT))
def test_old_flat_objective_key_hints_the_table(key):
    value = OLD_FLAT[key]
    message = (
        f"unknown config key learner.{key}: the objective's settings are in [learner.objective], "
        f"e.g. --set learner.objective.{key}={value}"
    )
    with pytest.raises(ConfigError) as info:
        load_config(overrides=[f"learner.{key}={value}"])
    assert str(info.value) == message
    assert load_config(overrides=[f"learner.objective.{key}={value}"])  # the hint's own spelling works


def test_old_flat_key_hint_comes_before_the_range_check():
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["learner.clip_low=1.5"])
    assert str(info.value) == (
        "unknown config key learner.clip_low: the objective's settings are in [learner.objective], "
        "e.g. --set learner.objective.clip_low=1.5"
    )


def test_old_objective_name_hints_the_name_key(tmp_path):
    hint = (
        "config key learner.objective is the table [learner.objective]: the objective is named by "
        "learner.objective.name, e.g. --set learner.objective.name=tis"
    )
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["learner.objective=tis"])
    assert str(info.value) == hint
    old = tmp_path / "old.toml"
    old.write_text('[learner]\nobjective = "tis"\n')
    with pytest.raises(ConfigError) as info:
        load_config(toml_path=str(old))
    assert str(info.value) == hint


@pytest.mark.parametrize(
    "override, message",
    [
        ("learner.objective.clipp=1", r"^unknown config key learner\.objective\.clipp \(known in \[learner\.objective\]: name, clip_low, .*\)$"),
        ("run.steps.x=1", r"^config key run\.steps takes a value, not a table of keys: write --set run\.steps=VALUE$"),
        ("learner.objective.name.x=tis", r"^--set 'learner\.objective\.name\.x=tis': the key must be section\.key or section\.table\.key"),
        ("learner..clip_low=0.1", r"^--set 'learner\.\.clip_low=0\.1': the key must be section\.key or section\.table\.key"),
    ],
)
def test_nested_keys_are_checked(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=[override])


def test_objective_table_from_toml_set_and_round_trip(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[learner]\nmini_batches = 2\n\n[learner.objective]\nname = "icepop"\nseq_filter = true\n')
    config = load_config(toml_path=str(path), overrides=["learner.objective.kl_coef=0.05", "learner.objective.icepop_high=4"])
    assert config.learner.mini_batches == 2
    assert config.learner.objective == ObjectiveConfig(name="icepop", seq_filter=True, kl_coef=0.05, icepop_high=4.0)
    text = dump_config(config)
    assert "\n[learner.objective]\n" in text and 'name = "icepop"' in text
    written = tmp_path / "config.toml"
    written.write_text(text)
    assert read_config_file(written) == config
    assert read_config_file(written, ["learner.objective.name=tis"]).learner.objective.name == "tis"


def test_objective_config_is_one_frozen_struct():
    from learner.objectives import ObjectiveConfig as FromLearner

    assert FromLearner is ObjectiveConfig
    with pytest.raises(AttributeError):
        ObjectiveConfig().clip_low = 0.5  # frozen
    with pytest.raises(TypeError):
        ObjectiveConfig("tis")  # keyword-only


def test_engine_config_does_not_import_torch():
    code = "import sys, engine.protocol.config; assert 'torch' not in sys.modules, 'engine.protocol.config imported torch'"
    subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[3], check=True)


def test_a_micro_batch_too_small_for_the_longest_episode_is_refused():
    with pytest.raises(ConfigError, match=r"^learner\.micro_batch_tokens \(2048\) is below play\.max_context_tokens \(4096\)"):
        load_config(overrides=["learner.micro_batch_tokens=2048"])
    assert load_config("paper").learner.micro_batch_tokens >= load_config("paper").play.max_context_tokens
