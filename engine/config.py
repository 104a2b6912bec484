"""Typed run configuration: one struct per component, loaded from TOML with `--set section.key=value` overrides
(`--set learner.objective.clip_low=0.1` for the nested `[learner.objective]` table).

    config = load_config(preset="default", toml_path=None, overrides=["run.steps=3"])

Every field has a default and a comment; the resolved config is written to the run directory as
`config.toml`, and `rollout worker` and `learner` processes read it back from there. Bad input raises
`ConfigError` with a one-line message naming the field and what to do.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal, get_args

import msgspec


class ConfigError(ValueError):
    """A user mistake in the configuration: the message names the field and the fix."""


class _Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


class RunConfig(_Section):
    steps: int = 3  # training steps (one learner update each)
    seed: int = 0  # seeds corpus sampling, play seeds and the learner
    run_dir: str = ""  # empty: runs/<date-time>
    max_staleness: int = 1  # eta: plays start only while the learner is at most this many versions ahead
    log_every_turn: bool = False


class ModelConfig(_Section):
    path: str = ""  # local Hugging Face folder; empty: the embedded SmolLM2-135M-Instruct (converted once)
    dtype: Literal["float32", "bfloat16"] = "float32"


class CurriculumConfig(_Section):
    skills: list[str] = msgspec.field(
        default_factory=lambda: [
            "Mathematical Reasoning",
            "Logical Deduction",
            "Spatial Reasoning",
            "Pattern Recognition",
            "Optimization",
            "Causal Inference",
        ]
    )
    skills_per_refresh: int = 3  # active skills each refresh epoch, rotated deterministically
    envs_per_step: int = 3  # environment slots, assigned to active skills round-robin
    refresh_interval: int = 2  # k: new environments every k steps; the designer reward is delayed by k steps
    design_attempts: int = 2  # attempts per slot (a fresh passage each); the reference uses 5
    corpus: str = ""  # JSONL (`text` or `orig_doc`) or a folder of .txt files; empty: the shipped corpus
    max_passage_words: int = 220  # passages are cut to this many words in the designer prompt
    memory_capacity: int = 200
    memory_positives: int = 1  # positive examples shown to the designer (the reference: 2; prompt length is CPU time)
    memory_negatives: int = 1
    example_code_chars: int = 1500  # characters of each memory example's code shown to the designer (reference: 2000)
    reuse_valid_envs: bool = True  # a slot whose designs all fail plays an earlier valid environment of its skill
    design: bool = True  # false: no designer at all, only the seed environments are played (a fixed-env baseline)
    seeds: str = ""  # a folder with seed environments and manifest.json; empty: actors/seeds


class PlayConfig(_Section):
    plays_per_env: int = 2  # G: plays without the hint per environment per step
    hint_plays_per_env: int = 2  # plays with the hint per environment per step
    max_turns: int = 3  # cap on an episode's turns (the environment's own max_turns is capped to this)
    agent_max_tokens: int = 48  # new tokens per agent turn
    agent_temperature: float = 0.6
    designer_max_tokens: int = 384
    designer_temperature: float = 0.6
    # The start of the designer's reply, given as prompt (not trained): a scaffold small models need.
    designer_prefill: str = "```python\nimport random\nimport re\n\n\nclass "
    hint_max_tokens: int = 64
    hint_temperature: float = 0.3
    top_p: float = 0.95
    top_k: int = 20
    max_context_tokens: int = 4096  # an episode stops (truncated) when its context would exceed this


class RewardConfig(_Section):
    designer_reward: Literal["blend", "regret"] = "blend"  # blend: the reference's paper runs; regret: the paper's pure
    regret_floor: float = 0.15  # blend: regret is normalised as clip(regret / floor, 0, 1)
    regret_weight: float = 0.4
    plateau_weight: float = 0.6
    plateau_low: float = 0.4
    plateau_high: float = 0.6
    plateau_ramp: float = 0.25
    designer_scale: float = 0.0  # 0: min(#agent samples / #designer samples * k, 50), as the reference
    designer_advantage: Literal["centred", "standardised"] = "centred"  # within each skill: minus the mean (the reference), or z-score
    train_designer: bool = True


ObjectiveName = Literal["decoupled_ppo", "tis", "icepop"]
OBJECTIVES: tuple[str, ...] = get_args(ObjectiveName)


class ObjectiveConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`[learner.objective]`: every objective clips r = pi_theta / pi_prox and weights it by k = pi_prox / mu."""

    # decoupled_ppo (AReaL; default), tis (truncated importance sampling, the SPADE reference), icepop.
    name: ObjectiveName = "decoupled_ppo"
    clip_low: float = 0.2  # r = pi_theta / pi_prox is clipped to [1 - clip_low, 1 + clip_high]
    clip_high: float = 0.28  # DAPO's "clip higher"
    behaviour_cap: float = 5.0  # decoupled_ppo: tokens with pi_prox / mu above this leave the loss
    tis_cap: float = 2.0  # tis: the weight is min(pi_prox / mu, tis_cap)
    icepop_low: float = 0.5  # icepop: weight pi_prox / mu inside [icepop_low, icepop_high], else the token leaves the loss
    icepop_high: float = 5.0
    seq_filter: bool = False  # drop a sequence whose geometric-mean pi_prox / mu leaves [seq_low, seq_high]
    seq_low: float = 0.99
    seq_high: float = 1.01
    kl_coef: float = 0.0  # k3 KL to the frozen initial model (loaded only when > 0)


# The names that were flat `learner.*` keys before `[learner.objective]` (`objective` itself was the name).
OBJECTIVE_KEYS = frozenset(f.name for f in msgspec.structs.fields(ObjectiveConfig))


class LearnerConfig(_Section):
    learning_rate: float = 1e-5
    weight_decay: float = 0.1
    betas: list[float] = msgspec.field(default_factory=lambda: [0.9, 0.98])
    # The policy-gradient objective and its corrections: the [learner.objective] table (learner/objectives.py).
    objective: ObjectiveConfig = msgspec.field(default_factory=ObjectiveConfig)
    max_grad_norm: float = 1.0
    micro_batch_tokens: int = 2048  # samples are packed into micro-batches of at most this many tokens
    designer_weight: float = 1.0  # role weights on the token-mean losses
    agent_weight: float = 1.0
    threads: int = 0  # torch threads; 0: all cores
    keep_policies: int = 3  # published policy folders kept on disk
    mini_batches: int = 1  # optimizer steps per TrainBatch (sample i in mini-batch i mod N); > 1 recomputes pi_prox first
    lr_schedule: Literal["constant", "cosine", "linear"] = "constant"  # decay after warm-up, to 0 at total_steps
    warmup_steps: int = 0  # optimizer steps of linear warm-up to learning_rate
    total_steps: int = 0  # optimizer steps the cosine / linear decay spans; 0: no decay
    # A full checkpoint (weights, optimizer, RNG) every N policy versions and at the end; 0: only at the end. After a
    # crash the learner resumes from the newest one and the engine resends the batches stored since (bit-for-bit).
    checkpoint_every: int = 10
    keep_checkpoints: int = 2  # the newest N checkpoint folders stay on disk; 0: all
    simulated_update_s: float = 0.0  # benchmarks only: sleep this long instead of updating (messages, publishing stay real)
    world_size: int = 1  # learner processes (one per GPU); > 1 runs the learner under torchrun with FSDP2
    device: Literal["auto", "cuda", "cpu"] = "auto"  # auto: cuda (nccl, bf16 autocast) when available, else cpu (gloo, fp32)
    lora_rank: int = 0  # > 0: train a LoRA adapter of this rank (peft) and publish only the adapter; 0: full fine-tuning
    lora_alpha: float = 16.0  # LoRA scaling: the update is (lora_alpha / lora_rank) * B @ A
    lora_dropout: float = 0.0  # dropout on the LoRA branch's input while training
    lora_targets: list[str] = msgspec.field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])  # module names that get an adapter


class SandboxConfig(_Section):
    workers: int = 16  # sandbox processes; an episode holds one while it waits for the model, so this bounds episodes in flight
    step_timeout_s: float = 10.0
    episode_timeout_s: float = 900.0  # wall clock from open to close, including the time waiting for the model
    memory_mb: int = 1024
    cpu_seconds: int = 60
    max_output_bytes: int = 65536
    episodes_per_worker: int = 200
    isolation: Literal["auto", "bubblewrap", "unshare", "rlimits"] = "auto"


class InferenceConfig(_Section):
    backend: Literal["transformers", "scripted", "timed", "vllm"] = "transformers"  # timed: benchmarks only
    max_batch: int = 16  # requests batched into one generate call
    batch_wait_s: float = 0.05  # how long the batcher waits for more requests before generating
    script: str = ""  # scripted backend: a JSON file {"designer": [...], "hint": [...], "agent": [...]}
    threads: int = 0  # torch threads in the worker; 0: all cores
    concurrency: int = 32  # episodes a worker runs at once
    # The timed benchmark backend: log-normal completion lengths, a fixed time per token per request.
    timed_seconds_per_token: float = 0.001
    timed_median_tokens: float = 300.0
    timed_sigma: float = 1.0
    timed_max_tokens: int = 8192


class WorkerConfig(_Section):
    count: int = 1  # rollout workers started by `up`
    address: str = ""  # the engine's worker socket; empty: ipc:// in /tmp; "tcp://0.0.0.0:5555" for other hosts
    heartbeat_s: float = 2.0
    dead_after_s: float = 60.0  # a worker silent this long is dropped and its tasks requeued
    connect_timeout_s: float = 60.0  # a worker whose hello nobody answers in this long gives up with an error


class Config(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    run: RunConfig = msgspec.field(default_factory=RunConfig)
    model: ModelConfig = msgspec.field(default_factory=ModelConfig)
    curriculum: CurriculumConfig = msgspec.field(default_factory=CurriculumConfig)
    play: PlayConfig = msgspec.field(default_factory=PlayConfig)
    reward: RewardConfig = msgspec.field(default_factory=RewardConfig)
    learner: LearnerConfig = msgspec.field(default_factory=LearnerConfig)
    sandbox: SandboxConfig = msgspec.field(default_factory=SandboxConfig)
    inference: InferenceConfig = msgspec.field(default_factory=InferenceConfig)
    worker: WorkerConfig = msgspec.field(default_factory=WorkerConfig)


# The paper's schedule (spade-reference.md §9): 24 environments a step, 8 plays and 16 hinted plays, k = 4, 25 turns.
PRESETS: dict[str, dict] = {
    "default": {},
    "paper": {
        "run": {"steps": 400, "max_staleness": 4},
        "curriculum": {
            "envs_per_step": 24, "refresh_interval": 4, "design_attempts": 5, "max_passage_words": 6000,
            "memory_positives": 2, "example_code_chars": 2000,
        },
        "play": {
            "plays_per_env": 8,
            "hint_plays_per_env": 16,
            "max_turns": 25,
            "agent_max_tokens": 8192,
            "designer_max_tokens": 16384,
            "hint_max_tokens": 4096,
            "max_context_tokens": 32768,
        },
        "learner": {"learning_rate": 1e-6},
        "inference": {"max_batch": 256, "concurrency": 256},
        "sandbox": {"workers": 256, "step_timeout_s": 30.0},
    },
}


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
        elif isinstance(body, dict):
            return f"config key {name} takes a value, not a table of keys: write --set {name}=VALUE"
    return None


def config_from_dict(data: dict) -> Config:
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
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
    data = _deep_merge({}, PRESETS[preset])
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


def check_config(config: Config) -> None:
    """Range checks msgspec's types cannot express."""
    c = config
    positive = {
        "run.steps": c.run.steps,
        "curriculum.envs_per_step": c.curriculum.envs_per_step,
        "curriculum.refresh_interval": c.curriculum.refresh_interval,
        "curriculum.design_attempts": c.curriculum.design_attempts,
        "curriculum.skills_per_refresh": c.curriculum.skills_per_refresh,
        "play.max_turns": c.play.max_turns,
        "play.agent_max_tokens": c.play.agent_max_tokens,
        "play.designer_max_tokens": c.play.designer_max_tokens,
        "inference.max_batch": c.inference.max_batch,
        "sandbox.workers": c.sandbox.workers,
        "worker.count": c.worker.count,
    }
    for name, value in positive.items():
        if value < 1:
            raise ConfigError(f"{name} must be at least 1 (got {value})")
    if c.play.plays_per_env < 0 or c.play.hint_plays_per_env < 0:
        raise ConfigError("play.plays_per_env and play.hint_plays_per_env must be >= 0")
    if c.play.plays_per_env + c.play.hint_plays_per_env < 1:
        raise ConfigError("play.plays_per_env + play.hint_plays_per_env must be at least 1")
    if c.run.max_staleness < 0:
        raise ConfigError(f"run.max_staleness must be >= 0 (got {c.run.max_staleness})")
    if not c.curriculum.skills:
        raise ConfigError("curriculum.skills must name at least one skill")
    if c.curriculum.skills_per_refresh > len(c.curriculum.skills):
        raise ConfigError(
            f"curriculum.skills_per_refresh ({c.curriculum.skills_per_refresh}) exceeds the "
            f"{len(c.curriculum.skills)} skills in curriculum.skills"
        )
    check_learner(c.learner)
    if c.inference.backend == "vllm":
        raise ConfigError("inference.backend = 'vllm' is not implemented yet: use 'transformers' (the [gpu] extra only installs vLLM)")
    if c.inference.backend == "scripted" and not c.inference.script:
        raise ConfigError("inference.backend = 'scripted' needs inference.script = a JSON file of completions")


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
    if len(config.betas) != 2:
        raise ConfigError("learner.betas must be two numbers, for example [0.9, 0.98]")
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
    return msgspec.toml.encode(config).decode()


def read_config_file(path: str | Path, overrides: list[str] = ()) -> Config:
    """Read a resolved config written by `dump_config` (the worker and learner processes; `up --resume`)."""
    data = tomllib.loads(Path(path).read_text())
    for text in overrides:
        data = _deep_merge(data, _parse_override(text))
    return config_from_dict(data)
