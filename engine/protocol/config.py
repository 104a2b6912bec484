"""Typed run configuration: one struct per component, loaded from TOML with `--set section.key=value` overrides
(`--set learner.objective.clip_low=0.1` for the nested `[learner.objective]` table).

    config = load_config(preset="default", toml_path=None, overrides=["run.steps=3"])

Every field has a default and a comment; the resolved config is written to the run directory as
`config.toml`, and `rollout worker` and `learner` processes read it back from there. Bad input raises
`ConfigError` with a one-line message naming the field and what to do. Presets (`PRESETS`) combine with commas.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal, get_args

import msgspec

from engine.protocol.config_sections import ABLATIONS, MAX_DRAWS, PAPER, RLVE_PRESET, TOOL_USE_PRESET, EvalConfig, RlveConfig
from engine.protocol.errors import InputError
from engine.protocol.paths import address_problem


class ConfigError(InputError, ValueError):
    """A user mistake in the configuration: the message names the field and the fix."""


class _Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


class RunConfig(_Section):
    steps: int = 3  # training steps (one learner update each)
    minutes: float = 0.0  # wall-clock budget from the first step (`up --minutes N`): no step starts after it; 0: none
    seed: int = 0  # seeds corpus sampling, play seeds and the learner
    run_dir: str = ""  # empty: runs/<date-time>
    max_staleness: int = 0  # eta: plays start only while the learner is at most this many versions behind them
    log_every_turn: bool = False
    learnable_window: int = 16  # steps per window of the paper's learnable share (Figure 6; metrics learnable_share_window)
    tensorboard: bool = False  # also log each metrics row to RUN_DIR/tensorboard, by step and by policy version (tensorboardX)
    wandb: bool = False  # also log each metrics row to Weights & Biases, offline, under RUN_DIR/wandb (wandb; sync it later)


class ModelConfig(_Section):
    path: str = ""  # local Hugging Face folder; empty: the embedded SmolLM2-135M-Instruct (converted once)
    dtype: Literal["float32", "bfloat16"] = "float32"


class CurriculumConfig(_Section):
    skills: list[str] = msgspec.field(default_factory=lambda: [
        "Mathematical Reasoning", "Logical Deduction", "Spatial Reasoning", "Pattern Recognition", "Optimization",
        "Causal Inference",
    ])
    skills_per_refresh: int = 2  # active skills each refresh epoch, rotated deterministically
    envs_per_step: int = 4  # environment slots, assigned to active skills round-robin (2 a skill: the designer advantage is centred per skill)
    refresh_interval: int = 2  # k: new environments every k steps; the designer reward is delayed by k steps
    design_attempts: int = 2  # attempts per slot (a fresh passage each); the reference uses 5
    corpus: str = ""  # JSONL (`text` or `orig_doc`) or a folder of .txt files; empty: the shipped corpus
    max_passage_words: int = 220  # passages are cut to this many words in the designer prompt
    memory_capacity: int = 200
    memory_positives: int = 1  # positive examples shown to the designer (the reference: 2; prompt length is CPU time)
    memory_negatives: int = 1
    example_code_chars: int = 1500  # characters of each memory example's code shown to the designer (reference: 2000)
    reuse_valid_envs: bool = True  # a slot whose designs all fail plays an earlier valid one of its skill (reference: empty)
    # false: no designer; each refresh draws environments without replacement from `fixed_envs` (or the seeds), a new
    # shuffled pass once the pool is used up (the reference's fixed-pool baseline)
    design: bool = True
    fixed_envs: str = ""  # with design = false: a folder of environment .py files (manifest.json optional); empty: seeds
    seeds: str = ""  # a folder with seed environments and manifest.json; empty: engine/protocol/data/seeds
    use_corpus: bool = True  # false: the designer writes with no passage (the paper's no-corpus ablation, cold-start prompt)
    retire_hanging_envs: bool = True  # an environment whose call hangs (sandbox.step_timeout_s) is played no more (reference)
    revalidate: bool = True  # a design claimed valid is validated again before it is played: by another worker, else its author in a fresh sandbox
    setting: Literal["games", "tool_use"] = "games"  # tool_use: tool APIs and instructions, the agent calls tools (`up --setting tool-use`)
    edit_share: float = 0.8  # share of design tasks that ask for a variant of a remembered valid environment (beyond the reference: 0)
    edit_mode: Literal["numbers", "code"] = "numbers"  # an edit writes new integer constants (actors/edits.py), or the whole code


class PlayConfig(_Section):
    plays_per_env: int = 6  # G: plays without the hint per environment per step
    hint_plays_per_env: int = 4  # plays with the hint per environment, when hinted plays are made (`hint_plays`)
    # refresh: only at a refresh step, for the environments made there (the reference); every_step: all, every step
    hint_plays: Literal["refresh", "every_step"] = "refresh"
    train_hint_plays: bool = False  # train on the hinted plays as agent samples too (the reference never does)
    end_on_cutoff: bool = False  # a reply cut at agent_max_tokens ends the episode, return 0 (the reference: true)
    max_turns: int = 3  # cap on an episode's turns (the environment's own max_turns is capped to this)
    agent_max_tokens: int = 48  # new tokens per agent turn
    agent_temperature: float = 0.6
    agent_prompt: Literal["reason", "answer"] = "answer"  # reason: the reference's player prompt; answer: the action only
    agent_prefill: str = "\\boxed{"  # the start of every agent reply, given as prompt (the reference: none)
    designer_max_tokens: int = 640  # a code edit writes its parent out in full: the easy seeds are about 450-530 tokens
    designer_temperature: float = 0.6
    edit_temperature: float = 1.0  # number edits (a small model at 0.6 copies the old numbers: 46 of 48 times)
    edit_draws: int = 5  # a number edit's replies at most: one that copies the parent is drawn again (1: never)
    designer_prefill: str = "```python\nimport random\nimport re\n\n\nclass "  # the start of a design reply (a scaffold)
    hint_max_tokens: int = 64
    hint_temperature: float = 0.3
    hint_attempts: int = 3  # hint calls a design (reference 3, 1/2/4 s apart); none answered: no hinted plays, regret 0
    hint_retry_backoff_s: float = 1.0  # the wait after the first failed call, doubled after each further one
    partial_rewards: bool = True  # the designer prompt allows partial-progress rewards in [0, 1] (reference); false: 1 or 0
    # The validator's filters beyond the reference's: solution() wins, the hint never shows, rewards in [-1, 1] (the
    quality_checks: bool = True  # reference: [-10, 10]); false (the reference) turns the first two into notes
    top_p: float = 0.95
    top_k: int = 20
    tool_timeout_s: float = 30.0  # tool-use setting: each tool call's own time limit in the sandbox (reference 30 s)
    mask_malformed_tool_calls: bool = False  # tool-use: a reply with an unparsable <tool_call> is not trained on, and reminded
    max_context_tokens: int = 4096  # an episode stops (truncated) when its context would exceed this


class RewardConfig(_Section):
    # blend: the reference's paper runs; regret: the paper's; learning_progress: the paper's ablation (engine/rewards.py)
    designer_reward: Literal["blend", "regret", "learning_progress"] = "blend"
    regret_floor: float = 0.15  # blend: regret is normalised as clip(regret / floor, 0, 1)
    regret_weight: float = 0.4
    plateau_weight: float = 0.6
    plateau_low: float = 0.4
    plateau_high: float = 0.6
    plateau_ramp: float = 0.25
    # The designer reward's win rate over the window's unhinted plays: their mean return (the reference), or the share > 0
    win_rate: Literal["mean_return", "share_won"] = "mean_return"
    progress_gamma: float = 0.85  # learning_progress: the slow EMA's weight on the newest skill win rate (reference 0.85)
    hang_penalty: float = -0.5  # raw designer reward of an environment with a hung call in its window (reference -0.5)
    hang_penalty_every_variant: bool = True  # the reference: false, only on its regret path (its blend ignores it)
    designer_scale: float = 0.0  # 0: min(#agent samples trained / #designer samples * k, 50), as the reference
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
    micro_batch_tokens: int = 4096  # samples are packed into micro-batches of at most this many tokens (>= play.max_context_tokens)
    # sample_mean: each sequence's token mean, then the mean over every sequence of the (mini-)batch, both roles
    # together (the reference); role_token_mean: one token mean per role, the role losses summed (so one designer
    # sample weighs as much as many agent samples).
    loss_aggregation: Literal["sample_mean", "role_token_mean"] = "sample_mean"
    designer_weight: float = 1.0  # role weights on the per-sample (or per-role) losses
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
    gpus: list[int] = msgspec.field(default_factory=list)  # GPUs that train (rank r on gpus[r], world_size of them); empty: 0..N-1
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
    # auto: vllm where it imports (bin/spade-engine runs from .venv-vllm on CPU machines; not with LoRA), else
    # transformers. timed: benchmarks only.
    backend: Literal["auto", "transformers", "scripted", "timed", "vllm"] = "auto"
    max_batch: int = 16  # requests batched into one generate call
    batch_wait_s: float = 0.05  # how long the batcher waits for more requests before generating
    script: str = ""  # scripted backend: a JSON file {"designer": [...], "hint": [...], "agent": [...]}
    threads: int = 0  # torch threads in the worker; 0: all cores
    concurrency: int = 32  # episodes a worker runs at once
    # The timed benchmark backend: log-normal completion lengths, a fixed time per token per request.
    timed_seconds_per_token: float = 0.001
    timed_median_tokens: float = 300.0
    timed_sigma: float = 1.0
    timed_capacity: int = 0  # sequences the timed backend decodes at once, others queue (a real server's limit); 0: unlimited
    timed_max_tokens: int = 8192
    # vLLM (actors/inference/vllm.py): GPUs that generate (tensor parallel; disjoint from learner.gpus; empty: GPU 0),
    # memory share reserved per GPU, KV cache GiB (0: 1 on CPU, else from the share), context limit (0: the model's).
    gpus: list[int] = msgspec.field(default_factory=list)
    gpu_memory_utilization: float = 0.85
    kv_cache_gb: float = 0.0
    max_model_len: int = 0
    enforce_eager: bool = False  # no torch.compile / CUDA graphs: faster start, slower decode
    request_timeout_s: float = 1800.0  # one request, and a weight update (drain, reload, cache reset, resume), may
    sync_timeout_s: float = 300.0  # take this long before failing (a failed weight update fails the worker)


class WorkerConfig(_Section):
    count: int = 1  # rollout workers started by `up`; 0: only workers attached by hand (`bin/spade-engine worker`)
    # The engine's worker socket; empty: ipc:// in /tmp; "tcp://0.0.0.0:5555" for other hosts (CURVE-encrypted, only
    # holders of run_dir/keys/worker.key get in; `up` prints the worker's command line).
    address: str = ""
    # The largest frame any socket of the run accepts (ZeroMQ MAXMSGSIZE; a larger one drops the sender's connection
    # unread). A paper-scale trajectory (32k tokens) is under 1 MB; policy files travel in 512 KiB chunks.
    max_message_mb: int = 16
    heartbeat_s: float = 2.0
    dead_after_s: float = 60.0  # a worker silent this long is dropped and its tasks requeued
    connect_timeout_s: float = 60.0  # a worker whose hello nobody answers in this long gives up with an error
    max_rejected: int = 3  # a worker whose results fail the engine's checks this many times is dropped (engine/peers/result_checks.py); 0: never


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
    eval: EvalConfig = msgspec.field(default_factory=EvalConfig)  # in-loop evaluation (engine/protocol/config_sections.py)
    rlve: RlveConfig = msgspec.field(default_factory=RlveConfig)  # the RLVE baseline (engine/protocol/config_sections.py)


# `--preset NAME[,NAME...]`: the presets merge left to right over the defaults. The ablations (spade-reference.md
# section 11) are overlays that change only what the ablation removes, so alone they run at the default's CPU size
# and `--preset paper,NAME` is the paper-scale ablation (`paper,frozen-designer,no-memory` is the paper's
# "no designer training, no memory" arm).
PRESETS: dict[str, dict] = {
    "default": {},
    "paper": PAPER,
    **ABLATIONS,
    "rlve": RLVE_PRESET,  # the fixed-environment RLVE baseline: Reasoning-Gym tasks, sliding-window difficulty
    "tool-use": TOOL_USE_PRESET,  # the tool-use setting at the reference's 8B/30B schedule (engine/protocol/config_sections.py)
}


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


def check_config(config: Config) -> None:
    """Range checks msgspec's types cannot express."""
    c = config
    if problem := address_problem("worker.address", c.worker.address):
        raise ConfigError(problem)
    if 1 <= c.learner.micro_batch_tokens < c.play.max_context_tokens:  # (below 1: the learner check says so)
        raise ConfigError(
            f"learner.micro_batch_tokens ({c.learner.micro_batch_tokens}) is below play.max_context_tokens "
            f"({c.play.max_context_tokens}): an episode that long could never be trained; raise it or lower the context"
        )
    if c.worker.count < 0 or c.worker.max_message_mb < 1:
        raise ConfigError("worker.count must be >= 0 and worker.max_message_mb at least 1")
    for name in (
        "run.steps", "run.learnable_window", "curriculum.envs_per_step", "curriculum.refresh_interval",
        "curriculum.design_attempts", "curriculum.skills_per_refresh", "play.max_turns", "play.agent_max_tokens",
        "play.designer_max_tokens", "play.hint_attempts", "play.edit_draws", "inference.max_batch", "sandbox.workers",
    ):
        section, key = name.split(".")
        value = getattr(getattr(c, section), key)
        if value < 1:
            raise ConfigError(f"{name} must be at least 1 (got {value})")
    if c.play.plays_per_env < 0 or c.play.hint_plays_per_env < 0:
        raise ConfigError("play.plays_per_env and play.hint_plays_per_env must be >= 0")
    if c.play.plays_per_env + c.play.hint_plays_per_env < 1:
        raise ConfigError("play.plays_per_env + play.hint_plays_per_env must be at least 1")
    if not 0.0 < c.reward.progress_gamma <= 1.0 or not 0.0 <= c.curriculum.edit_share <= 1.0 or c.run.minutes < 0 or c.play.edit_draws > MAX_DRAWS:
        raise ConfigError(f"reward.progress_gamma must be in (0, 1], curriculum.edit_share in [0, 1], run.minutes >= 0 and play.edit_draws <= {MAX_DRAWS}")
    if c.curriculum.fixed_envs and c.curriculum.design:
        raise ConfigError("curriculum.fixed_envs is played only without a designer: add --set curriculum.design=false (or --preset fixed-envs)")
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
    check_placement(c)
    if c.inference.backend == "scripted" and not c.inference.script:
        raise ConfigError("inference.backend = 'scripted' needs inference.script = a JSON file of completions")


def check_placement(c: Config) -> None:
    """Generating and training GPUs are disjoint (counts are checked where GPUs are seen: worker and learner start)."""
    for name, gpus in (("inference.gpus", c.inference.gpus), ("learner.gpus", c.learner.gpus)):
        if any(g < 0 for g in gpus) or len(set(gpus)) != len(gpus):
            raise ConfigError(f"{name} = {gpus}: GPU indices must be distinct and >= 0")
    shared = sorted(set(c.inference.gpus) & set(c.learner.gpus))
    if shared:
        raise ConfigError(f"inference.gpus and learner.gpus share GPU {shared}: give generation and training different GPUs")
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
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"the run's config {file} cannot be read ({exc}): restore it, or start a new run") from None
    for text in overrides:
        data = _deep_merge(data, _parse_override(text))
    return config_from_dict(data)
