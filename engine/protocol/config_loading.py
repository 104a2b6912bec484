"""Loading the run configuration: presets, a TOML file and `--set section.key=value` overrides merged into a
`Config` (engine/protocol/config.py), and every check of it, in one style: a `ConfigError` whose one line names the
field, the value and the fix.

    config = load_config(preset="paper,no-memory", toml_path="my.toml", overrides=["run.steps=3"])
    text = dump_config(config)                  # the run directory's config.toml
    config = read_config_file(run_dir / "config.toml", overrides=["run.steps=10"])   # workers, learner, --resume

`--set learner.objective.clip_low=0.1` reaches the nested `[learner.objective]` table; a bare word is taken as a
string (`--set model.path=/models/x`).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import msgspec

from engine.protocol.config import MAX_DRAWS, OBJECTIVES, Config, LearnerConfig, ObjectiveConfig
from engine.protocol.errors import InputError
from engine.protocol.paths import address_problem
from engine.protocol.presets import PRESETS


class ConfigError(InputError, ValueError):
    """A user mistake in the configuration: the message names the field and the fix."""


# The names that were flat `learner.*` keys before `[learner.objective]` (`objective` itself was the name).
OBJECTIVE_KEYS = frozenset(f.name for f in msgspec.structs.fields(ObjectiveConfig))


def resolve_preset(preset: str) -> dict:
    """The config data of `preset`, one name or several joined by commas (merged left to right)."""
    data: dict = {}
    for name in (part.strip() for part in preset.split(",")):
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r} (known: {', '.join(PRESETS)}; combine them as paper,no-memory)")
        data = _deep_merge(data, PRESETS[name])
    return data


def _deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _parse_override(text: str) -> dict:
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected section.key=value, for example --set run.steps=3")
    dotted, raw = text.split("=", 1)
    keys = dotted.strip().split(".")
    if len(keys) not in (2, 3) or not all(keys):
        raise ConfigError(
            f"--set {text!r}: the key must be section.key or section.table.key, for example run.steps or learner.objective.clip_low"
        )
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare word is taken as a string: --set model.path=/models/x
    for key in reversed(keys):
        value = {key: value}
    return value


def _is_section(kind) -> bool:
    return isinstance(kind, type) and issubclass(kind, msgspec.Struct)


def _as_value(value) -> str:
    """A value the way `--set` takes it (for the hints)."""
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value).decode()


def _moved_key(section: str, key: str, value) -> str | None:
    """The hint for a key that moved into a nested table: `learner.clip_low` is `learner.objective.clip_low`."""
    if section == "learner" and key in OBJECTIVE_KEYS:
        return (
            f"unknown config key learner.{key}: the objective's settings are in [learner.objective], "
            f"e.g. --set learner.objective.{key}={_as_value(value)}"
        )
    return None


def _not_a_table(name: str, value) -> str:
    if name == "learner.objective":  # the old `learner.objective = "tis"`
        return (
            "config key learner.objective is the table [learner.objective]: the objective is named by "
            f"learner.objective.name, e.g. --set learner.objective.name={_as_value(value)}"
        )
    return f"config section {name!r} must be a table of keys"


def _unknown_key(data: dict, kind: type = Config, dotted: str = "") -> str | None:
    """The first key of `data` that `kind` (a config struct) does not have, as a one-line message; nested tables too."""
    fields = {f.name: f.type for f in msgspec.structs.fields(kind)}
    for key, body in data.items():
        name = f"{dotted}.{key}" if dotted else key
        if key not in fields:
            if not dotted:
                return f"unknown config section {key!r} (known: {', '.join(fields)})"
            return _moved_key(dotted, key, body) or f"unknown config key {name} (known in [{dotted}]: {', '.join(fields)})"
        if _is_section(fields[key]):
            if not isinstance(body, dict):
                return _not_a_table(name, body)
            problem = _unknown_key(body, fields[key], name)
            if problem:
                return problem
        elif isinstance(body, dict) and getattr(fields[key], "__origin__", None) is not dict:  # a dict field takes a table
            return f"config key {name} takes a value, not a table of keys: write --set {name}=VALUE"
    return None


def config_from_dict(data: dict) -> Config:
    """A checked `Config` from merged config data; every problem is a one-line ConfigError."""
    problem = _unknown_key(data)
    if problem:
        raise ConfigError(problem)
    try:
        config = msgspec.convert(data, Config)
    except msgspec.ValidationError as exc:
        # msgspec names the path as `$.section.key`; say it the way a user writes it.
        raise ConfigError(f"bad config value: {str(exc).replace('$.', '')}") from None
    check_config(config)
    return config


def load_config(preset: str = "default", toml_path: str | None = None, overrides: list[str] = ()) -> Config:
    """The config of a new run: `preset`, then the TOML file, then each `--set`, merged in that order."""
    data = resolve_preset(preset)
    if toml_path:
        path = Path(toml_path)
        if not path.is_file():
            raise ConfigError(f"config file {toml_path} does not exist")
        try:
            data = _deep_merge(data, tomllib.loads(path.read_text()))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {toml_path} is not valid TOML: {exc}") from None
    for text in overrides:
        data = _deep_merge(data, _parse_override(text))
    return config_from_dict(data)


# Counts and sizes that must be at least 1, and values that must not be negative (checked by name, so that the
# message names the field).
AT_LEAST_ONE = (
    "run.steps", "run.learnable_window", "curriculum.envs_per_step", "curriculum.refresh_interval",
    "curriculum.design_attempts", "curriculum.skills_per_refresh", "play.max_turns", "play.agent_max_tokens",
    "play.designer_max_tokens", "play.hint_attempts", "play.edit_draws", "inference.max_batch", "sandbox.workers",
    "worker.max_message_mb", "eval.episodes", "rlve.window", "rlve.difficulty_step",
)
NOT_NEGATIVE = (
    "run.minutes", "run.max_staleness", "play.plays_per_env", "play.hint_plays_per_env", "worker.count", "eval.every",
    "eval.max_tokens",
)


def _value(config: Config, name: str):
    section, key = name.split(".")
    return getattr(getattr(config, section), key)


def check_config(config: Config) -> None:
    """Range checks msgspec's types cannot express, every section's."""
    c = config
    if problem := address_problem("worker.address", c.worker.address):
        raise ConfigError(problem)
    for key, value in c.model.chat_template_kwargs.items():
        if not isinstance(value, (str, int, float, bool)):
            raise ConfigError(f"model.chat_template_kwargs.{key} must be a string, number or boolean (got {value!r}): "
                              "the chat template takes plain values, e.g. {enable_thinking = false}")
    if 1 <= c.learner.micro_batch_tokens < c.play.max_context_tokens:  # (below 1: the learner check says so)
        raise ConfigError(
            f"learner.micro_batch_tokens ({c.learner.micro_batch_tokens}) is below play.max_context_tokens "
            f"({c.play.max_context_tokens}): an episode that long could never be trained; raise it or lower the context"
        )
    for name in AT_LEAST_ONE:
        if (value := _value(c, name)) < 1:
            raise ConfigError(f"{name} must be at least 1 (got {value})")
    for name in NOT_NEGATIVE:
        if (value := _value(c, name)) < 0:
            raise ConfigError(f"{name} must be >= 0 (got {value})")
    if c.worker.lease_factor < 1.0:
        raise ConfigError(f"worker.lease_factor must be at least 1 (got {c.worker.lease_factor}): a shorter deadline than a task's own bound times out honest workers")
    if c.worker.max_timeouts < 0:
        raise ConfigError(f"worker.max_timeouts must be >= 0 (got {c.worker.max_timeouts})")
    if c.worker.unread_heartbeats and c.worker.unread_heartbeats < 3:
        raise ConfigError(f"worker.unread_heartbeats must be 0 (off) or at least 3 (got {c.worker.unread_heartbeats}): a task can be "
                          "in flight across a beat or two, so a smaller bound drops honest workers")
    if c.worker.max_messages_per_s < 0 or (c.worker.max_messages_per_s and c.worker.message_burst < 100):
        raise ConfigError(f"worker.max_messages_per_s must be >= 0 (0: no limit) and worker.message_burst at least 100 (got "
                          f"{c.worker.max_messages_per_s}, {c.worker.message_burst}): a worker sends bursts of results and fetches")
    if c.play.plays_per_env + c.play.hint_plays_per_env < 1:
        raise ConfigError("play.plays_per_env + play.hint_plays_per_env must be at least 1")
    if c.play.edit_draws > MAX_DRAWS:
        raise ConfigError(f"play.edit_draws must be at most {MAX_DRAWS} (got {c.play.edit_draws})")
    for name, value, low_open in (("reward.progress_gamma", c.reward.progress_gamma, True),
                                  ("curriculum.edit_share", c.curriculum.edit_share, False),
                                  ("rlve.accuracy", c.rlve.accuracy, True)):
        if not (0.0 < value <= 1.0 if low_open else 0.0 <= value <= 1.0):
            raise ConfigError(f"{name} must be in {'(0' if low_open else '[0'}, 1] (got {value})")
    if c.curriculum.fixed_envs and c.curriculum.design:
        raise ConfigError("curriculum.fixed_envs is played only without a designer: add --set curriculum.design=false (or --preset fixed-envs)")
    if not c.curriculum.skills:
        raise ConfigError("curriculum.skills must name at least one skill")
    if c.curriculum.skills_per_refresh > len(c.curriculum.skills):
        raise ConfigError(
            f"curriculum.skills_per_refresh ({c.curriculum.skills_per_refresh}) exceeds the "
            f"{len(c.curriculum.skills)} skills in curriculum.skills"
        )
    check_learner(c.learner)
    check_placement(c)
    if c.inference.backend == "scripted" and not c.inference.script:
        raise ConfigError("inference.backend = 'scripted' needs inference.script = a JSON file of completions")


def check_placement(c: Config) -> None:
    """What the GPU lists say without the node: distinct indices, and generation and training on different GPUs
    unless `inference.placement = "time-shared"` shares them. The rest needs the node's GPUs and is checked by the
    placement plan `up` makes (engine/protocol/placement.py): counts, stacked engines, memory."""
    for name, gpus in (("inference.gpus", c.inference.gpus), ("learner.gpus", c.learner.gpus)):
        if any(g < 0 for g in gpus) or len(set(gpus)) != len(gpus):
            raise ConfigError(f"{name} = {gpus}: GPU indices must be distinct and >= 0")
    shared = sorted(set(c.inference.gpus) & set(c.learner.gpus))
    if shared and c.inference.placement != "time-shared":
        raise ConfigError(f"inference.gpus and learner.gpus share GPU {shared}: give generation and training different GPUs, "
                          "or set inference.placement = \"time-shared\" to share them (the engines sleep while the learner updates)")
    if c.inference.tensor_parallel < 0:
        raise ConfigError(f"inference.tensor_parallel must be >= 0 (got {c.inference.tensor_parallel}; 0: chosen by the plan)")
    tp = c.inference.tensor_parallel or 1
    if c.inference.gpus and c.worker.count > 1 and c.worker.count * tp > len(c.inference.gpus):
        raise ConfigError(f"worker.count = {c.worker.count} engines of {tp} GPU(s) would stack on inference.gpus = {c.inference.gpus}: "
                          f"set worker.count to at most {len(c.inference.gpus) // tp} (or 1: one engine per GPU group), or list more GPUs")
    if c.learner.gpus and len(c.learner.gpus) != c.learner.world_size:
        raise ConfigError(
            f"learner.gpus names {len(c.learner.gpus)} GPUs but learner.world_size is {c.learner.world_size}: one learner process per GPU"
        )
    if not 0.0 < c.inference.gpu_memory_utilization <= 1.0:
        raise ConfigError(f"inference.gpu_memory_utilization must be in (0, 1] (got {c.inference.gpu_memory_utilization})")


def check_learner(config: LearnerConfig) -> None:
    """The `[learner]` and `[learner.objective]` range checks (also run by `Trainer` on a hand-built LearnerConfig)."""
    for name in ("mini_batches", "micro_batch_tokens", "world_size"):
        if getattr(config, name) < 1:
            raise ConfigError(f"learner.{name} must be at least 1 (got {getattr(config, name)})")
    for name in ("warmup_steps", "total_steps", "checkpoint_every", "keep_checkpoints", "lora_rank"):
        if getattr(config, name) < 0:
            raise ConfigError(f"learner.{name} must be >= 0 (got {getattr(config, name)})")
    if config.total_steps and config.total_steps <= config.warmup_steps:
        raise ConfigError(
            f"learner.total_steps ({config.total_steps}) must exceed learner.warmup_steps ({config.warmup_steps}), "
            "or be 0 for no decay"
        )
    if not 0.0 <= config.micro_batch_padding <= 1.0:
        raise ConfigError(f"learner.micro_batch_padding must be in [0, 1] (got {config.micro_batch_padding}): the largest "
                          "share of a micro-batch that may be padding; 1 turns the limit off")
    if len(config.betas) != 2:
        raise ConfigError("learner.betas must be two numbers, for example [0.9, 0.98]")
    if config.lora_rank > 0 and config.world_size > 1:
        raise ConfigError(
            f"learner.lora_rank > 0 (a LoRA adapter) trains in one process, but learner.world_size is "
            f"{config.world_size}: set learner.lora_rank=0 to train the full model across GPUs (the default), "
            "or learner.world_size=1"
        )
    if config.lora_rank > 0 and config.cpu_offload == "on":
        raise ConfigError(
            "learner.cpu_offload = \"on\" offloads full fine-tuning's fp32 state, but learner.lora_rank > 0 trains an "
            "adapter (whose state is small): set learner.cpu_offload = \"auto\" or learner.lora_rank = 0"
        )
    if config.lora_rank > 0 and not config.lora_targets:
        raise ConfigError("learner.lora_targets must name at least one module when learner.lora_rank > 0")
    if not 0.0 <= config.lora_dropout < 1.0:
        raise ConfigError(f"learner.lora_dropout must be in [0, 1) (got {config.lora_dropout})")
    _check_objective(config.objective)


def _check_objective(o: ObjectiveConfig) -> None:
    if o.name not in OBJECTIVES:
        raise ConfigError(f"learner.objective.name must be one of {', '.join(OBJECTIVES)} (got {o.name!r})")
    if not 0.0 <= o.clip_low < 1.0:
        raise ConfigError(f"learner.objective.clip_low must be in [0, 1) (got {o.clip_low})")
    if o.clip_high < 0.0:
        raise ConfigError(f"learner.objective.clip_high must be >= 0 (got {o.clip_high})")
    for name in ("behaviour_cap", "tis_cap"):
        if getattr(o, name) <= 0.0:
            raise ConfigError(f"learner.objective.{name} must be > 0 (got {getattr(o, name)})")
    if o.icepop_low < 0.0:
        raise ConfigError(f"learner.objective.icepop_low must be >= 0 (got {o.icepop_low})")
    if o.icepop_low > o.icepop_high:
        raise ConfigError(
            f"learner.objective.icepop_low ({o.icepop_low}) must not exceed learner.objective.icepop_high ({o.icepop_high})"
        )
    if o.seq_low <= 0.0:
        raise ConfigError(f"learner.objective.seq_low must be > 0 (got {o.seq_low})")
    if o.seq_low > o.seq_high:
        raise ConfigError(f"learner.objective.seq_low ({o.seq_low}) must not exceed learner.objective.seq_high ({o.seq_high})")
    if o.kl_coef < 0.0:
        raise ConfigError(f"learner.objective.kl_coef must be >= 0 (got {o.kl_coef})")


def dump_config(config: Config) -> str:
    """The resolved config as TOML: the run directory's config.toml."""
    return msgspec.toml.encode(config).decode()


def read_config_file(path: str | Path, overrides: list[str] = ()) -> Config:
    """Read a resolved config written by `dump_config` (the worker and learner processes; `up --resume`)."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"the run's config {file} cannot be read ({exc}): restore it, or start a new run") from None
    if isinstance(data.get("run"), dict):  # runs written before the unused run.log_every_turn was removed still resume
        data["run"].pop("log_every_turn", None)
    for text in overrides:
        data = _deep_merge(data, _parse_override(text))
    return config_from_dict(data)
