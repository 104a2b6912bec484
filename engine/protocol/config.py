"""The run configuration's schema: one struct per `[section]` of the TOML, every field with its default and a comment.

    config = Config()                        # the defaults; engine/protocol/config_loading.py builds one from presets,
    config.play.agent_temperature            # a TOML file and `--set section.key=value` overrides, and checks it

Every section derives from `Section` (unknown keys are refused). Ranges msgspec's types cannot express are checked
in one place, engine/protocol/config_loading.py (`check_config`); the presets are engine/protocol/presets.py. The
resolved config is written to the run directory as `config.toml`, and `rollout worker` and `learner` processes read
it back from there.
"""

from __future__ import annotations

from typing import Literal, get_args

import msgspec


class Section(msgspec.Struct, forbid_unknown_fields=True):
    """A config table: a TOML key this struct does not have is an error, not silently ignored (msgspec passes
    forbid_unknown_fields on to subclasses; kw_only and frozen it does not, so a section that wants them says so)."""


class RunConfig(Section):
    steps: int = 3  # training steps (one learner update each)
    minutes: float = 0.0  # wall-clock budget from the first step (`up --minutes N`): no step starts after it; 0: none
    seed: int = 0  # seeds corpus sampling, play seeds and the learner
    run_dir: str = ""  # empty: runs/<date-time>
    max_staleness: int = 0  # eta: plays start only while the learner is at most this many versions behind them
    learnable_window: int = 16  # steps per window of the paper's learnable share (Figure 6; metrics learnable_share_window)
    tensorboard: bool = False  # also log each metrics row to RUN_DIR/tensorboard, by step and by policy version (tensorboardX)
    wandb: bool = False  # also log each metrics row to Weights & Biases, offline, under RUN_DIR/wandb (wandb; sync it later)


class ModelConfig(Section):
    path: str = ""  # local Hugging Face folder, or a hub id (owner/name: fetched once into the HF cache); empty: the embedded SmolLM2-135M-Instruct (converted once)
    dtype: Literal["float32", "bfloat16"] = "float32"  # the workers' and published versions' dtype, the learner's compute dtype (its master weights: always fp32)
    # extra arguments of every chat-template render (agent, designer, hint writer, tool use, evaluation), TOML
    # scalars only; e.g. {enable_thinking = false} for Qwen3's hybrid template (an empty think block in each prompt)
    chat_template_kwargs: dict[str, object] = msgspec.field(default_factory=dict)


class CurriculumConfig(Section):
    skills: list[str] = msgspec.field(default_factory=lambda: [  # the skills environments are designed for
        "Mathematical Reasoning", "Logical Deduction", "Spatial Reasoning", "Pattern Recognition", "Optimization",
        "Causal Inference",
    ])
    skills_per_refresh: int = 2  # active skills each refresh epoch, rotated deterministically
    envs_per_step: int = 4  # environment slots, assigned to active skills round-robin (2 a skill: the designer advantage is centred per skill)
    refresh_interval: int = 2  # k: new environments every k steps; the designer reward is delayed by k steps
    design_attempts: int = 2  # attempts per slot (a fresh passage each); the reference uses 5
    corpus: str = ""  # JSONL (`text` or `orig_doc`) or a folder of .txt files; empty: the shipped corpus
    max_passage_words: int = 220  # passages are cut to this many words in the designer prompt
    memory_capacity: int = 200  # environments remembered for the designer's examples; the oldest are evicted beyond it
    memory_positives: int = 1  # positive examples shown to the designer (the reference: 2; prompt length is CPU time)
    memory_negatives: int = 1  # negative (rejected or unlearnable) examples shown to the designer
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


MAX_DRAWS = 16  # play.edit_draws at most (and a DesignResult's draws: engine/peers/result_checks.py)


class PlayConfig(Section):
    plays_per_env: int = 6  # G: plays without the hint per environment per step
    hint_plays_per_env: int = 4  # plays with the hint per environment, when hinted plays are made (`hint_plays`)
    # refresh: only at a refresh step, for the environments made there (the reference); every_step: all, every step
    hint_plays: Literal["refresh", "every_step"] = "refresh"
    # The instance (reset seed) of each play in an environment's group at a step: distinct, one per play (the
    # reference resets each training play without a seed); shared, one for the whole group, hinted plays included,
    # so a group's returns differ only by what the plays did, as a GRPO group shares its prompt.
    group_seeds: Literal["distinct", "shared"] = "distinct"
    train_hint_plays: bool = False  # train on the hinted plays as agent samples too (the reference never does)
    end_on_cutoff: bool = False  # a reply cut at agent_max_tokens ends the episode, return 0 (the reference: true)
    max_turns: int = 3  # cap on an episode's turns (the environment's own max_turns is capped to this)
    agent_max_tokens: int = 48  # new tokens per agent turn
    agent_temperature: float = 0.6  # sampling temperature of agent turns
    agent_prompt: Literal["reason", "answer"] = "answer"  # reason: the reference's player prompt; answer: the action only
    agent_prefill: str = "\\boxed{"  # the start of every agent reply, given as prompt (the reference: none)
    # End an agent reply at its action (stop strings; actors/parsing.py `action_stops`): games, at the `}` closing the
    # box agent_prefill opens; tool use, at </answer> or the first </tool_call>. The reference lets replies run on.
    stop_at_action: bool = True
    designer_max_tokens: int = 640  # a code edit writes its parent out in full: the easy seeds are about 450-530 tokens
    designer_temperature: float = 0.6  # sampling temperature of designs written from scratch and code edits
    edit_temperature: float = 1.0  # number edits (a small model at 0.6 copies the old numbers: 46 of 48 times)
    edit_draws: int = 5  # a number edit's replies at most: one that copies the parent is drawn again (1: never)
    designer_prefill: str = "```python\nimport random\nimport re\n\n\nclass "  # the start of a design reply (a scaffold)
    hint_max_tokens: int = 64  # new tokens of a hint
    hint_temperature: float = 0.3  # sampling temperature of hints
    hint_attempts: int = 3  # hint calls a design (reference 3, 1/2/4 s apart); none answered: no hinted plays, regret 0
    hint_retry_backoff_s: float = 1.0  # the wait after the first failed call, doubled after each further one
    partial_rewards: bool = True  # the designer prompt allows partial-progress rewards in [0, 1] (reference); false: 1 or 0
    # The validator's filters beyond the reference's: solution() wins, the hint never shows, rewards in [-1, 1] (the
    quality_checks: bool = True  # reference: [-10, 10]); false (the reference) turns the first two into notes
    top_p: float = 0.95  # nucleus sampling, every role
    top_k: int = 20  # top-k sampling, every role
    tool_timeout_s: float = 30.0  # tool-use setting: each tool call's own time limit in the sandbox (reference 30 s)
    mask_malformed_tool_calls: bool = False  # tool-use: a reply with an unparsable <tool_call> is not trained on, and reminded
    max_context_tokens: int = 4096  # an episode stops (truncated) when its context would exceed this


class RewardConfig(Section):
    # blend: the reference's paper runs; regret: the paper's; learning_progress: the paper's ablation (engine/rewards.py)
    designer_reward: Literal["blend", "regret", "learning_progress"] = "blend"
    regret_floor: float = 0.15  # blend: regret is normalised as clip(regret / floor, 0, 1)
    regret_weight: float = 0.4  # blend: the weight of the normalised regret
    plateau_weight: float = 0.6  # blend: the weight of plateau(win rate)
    plateau_low: float = 0.4  # plateau(win rate) is 1 for a win rate in [plateau_low, plateau_high] ...
    plateau_high: float = 0.6  # (the plateau's upper end)
    plateau_ramp: float = 0.25  # ... and falls linearly to 0 this far outside it
    # The designer reward's win rate over the window's unhinted plays: their mean return (the reference), or the share > 0
    win_rate: Literal["mean_return", "share_won"] = "mean_return"
    progress_gamma: float = 0.85  # learning_progress: the slow EMA's weight on the newest skill win rate (reference 0.85)
    hang_penalty: float = -0.5  # raw designer reward of an environment with a hung call in its window (reference -0.5)
    hang_penalty_every_variant: bool = True  # the reference: false, only on its regret path (its blend ignores it)
    designer_scale: float = 0.0  # 0: min(#agent samples trained / #designer samples * k, 50), as the reference
    designer_advantage: Literal["centred", "standardised"] = "centred"  # within each skill: minus the mean (the reference), or z-score
    train_designer: bool = True  # false: designs are still made and rewarded, never trained on (frozen-designer)


ObjectiveName = Literal["decoupled_ppo", "tis", "icepop"]
OBJECTIVES: tuple[str, ...] = get_args(ObjectiveName)


class ObjectiveConfig(Section, frozen=True, kw_only=True):
    """`[learner.objective]`: every objective clips r = pi_theta / pi_prox and weights it by k = pi_prox / mu."""

    # decoupled_ppo (AReaL; default), tis (truncated importance sampling, the SPADE reference), icepop.
    name: ObjectiveName = "decoupled_ppo"
    clip_low: float = 0.2  # r = pi_theta / pi_prox is clipped to [1 - clip_low, 1 + clip_high]
    clip_high: float = 0.28  # DAPO's "clip higher"
    behaviour_cap: float = 5.0  # decoupled_ppo: tokens with pi_prox / mu above this leave the loss
    tis_cap: float = 2.0  # tis: the weight is min(pi_prox / mu, tis_cap)
    icepop_low: float = 0.5  # icepop: weight pi_prox / mu inside [icepop_low, icepop_high], else the token leaves the loss
    icepop_high: float = 5.0  # icepop: the upper end of the kept band
    seq_filter: bool = False  # drop a sequence whose geometric-mean pi_prox / mu leaves [seq_low, seq_high]
    seq_low: float = 0.99  # seq_filter: the lower end of the kept band
    seq_high: float = 1.01  # seq_filter: the upper end of the kept band
    kl_coef: float = 0.0  # k3 KL to the frozen initial model (loaded only when > 0)


class LearnerConfig(Section):
    learning_rate: float = 2.5e-5  # AdamW's peak learning rate (after warm-up); with a LoRA adapter, 2e-4 moves it about as far
    weight_decay: float = 0.1  # AdamW's decoupled weight decay
    betas: list[float] = msgspec.field(default_factory=lambda: [0.9, 0.98])  # AdamW's (beta1, beta2)
    # The policy-gradient objective and its corrections: the [learner.objective] table (learner/objectives.py).
    objective: ObjectiveConfig = msgspec.field(default_factory=ObjectiveConfig)
    max_grad_norm: float = 1.0  # gradients are clipped to this global norm
    micro_batch_tokens: int = 4096  # samples are packed into micro-batches of at most this many tokens (>= play.max_context_tokens)
    # A micro-batch closes before its padding (rows x longest, less its tokens) passes this share of its padded size:
    # padded positions cost a full forward and backward; 1.0: only micro_batch_tokens splits (the update is the same).
    micro_batch_padding: float = 0.1
    # Recompute each decoder layer's activations during backward instead of keeping them (a layer keeps only its
    # input): the activations of a micro-batch shrink by ~35x at 4B width for one more forward's compute. Off on
    # CPU (the default's sizes fit; it costs time), on in `paper` (32k-token micro-batches; learner/memory_plan.py).
    activation_checkpointing: bool = False
    # Keep the fp32 master weights, gradients and AdamW moments in host RAM (FSDP2's CPU offload; the optimizer
    # steps on the CPU) and hold only the layers being computed on the GPU: the update is unchanged, slower. auto:
    # `up` turns it on when its memory plan fits the GPUs only that way (one 80 GB GPU at the paper's 4B), else off;
    # on the CPU, or started without `up`, auto is off. on / off: as said (on with full fine-tuning only).
    cpu_offload: Literal["auto", "on", "off"] = "auto"
    # sample_mean: each sequence's token mean, then the mean over every sequence of the (mini-)batch, both roles
    # together (the reference); role_token_mean: one token mean per role, the role losses summed (so one designer
    # sample weighs as much as many agent samples).
    loss_aggregation: Literal["sample_mean", "role_token_mean"] = "sample_mean"
    designer_weight: float = 1.0  # role weights on the per-sample (or per-role) losses
    agent_weight: float = 1.0  # (the agent role's weight)
    threads: int = 0  # torch threads on CPU; 0: all cores, or beside the workers their half (engine/protocol/devices.py)
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
    device: Literal["auto", "cuda", "cpu"] = "auto"  # auto: cuda (nccl) when available, else cpu (gloo); computes in model.dtype
    gpus: list[int] = msgspec.field(default_factory=list)  # GPUs that train (rank r on gpus[r], world_size of them); empty: 0..N-1
    lora_rank: int = 0  # > 0: train a LoRA adapter of this rank (peft) and publish only the adapter; 0: full fine-tuning
    lora_alpha: float = 16.0  # LoRA scaling: the update is (lora_alpha / lora_rank) * B @ A
    lora_dropout: float = 0.0  # dropout on the LoRA branch's input while training
    lora_targets: list[str] = msgspec.field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])  # module names that get an adapter


class SandboxConfig(Section):
    workers: int = 16  # sandbox processes; an episode holds one while it waits for the model, so this bounds episodes in flight
    step_timeout_s: float = 10.0  # one call into an environment (reset, step, a tool) may take this long; longer: it hangs
    # The environment's own time in one episode (inside load, reset, step and tool calls; the wait for the model
    # between them is not counted, so a busy generator does not end plays); a play past it fails, counted in the
    # step's plays_ended_by_clock. play_timeout_s: a whole play's wall clock, model waits included, so a stuck one
    # ends too (the worker's task lease is worker.lease_factor x this).
    episode_timeout_s: float = 300.0  # (the reference: 300 s per play)
    play_timeout_s: float = 3600.0
    memory_mb: int = 1024  # address-space limit of each sandbox process
    cpu_seconds: int = 60  # CPU-time limit of each sandbox process
    max_output_bytes: int = 65536  # the largest reply a sandbox process may send (a longer one fails as `limit`)
    episodes_per_worker: int = 200  # a sandbox process is replaced after this many episodes
    # auto: the strongest this machine has; the fallback levels (unshare, rlimits) need Landlock unless named with
    # "-unconfined-reads", an explicit opt-in to host files that model-written code can read
    isolation: Literal["auto", "bubblewrap", "unshare", "rlimits", "unshare-unconfined-reads", "rlimits-unconfined-reads"] = "auto"


class InferenceConfig(Section):
    # auto: vllm where it imports (bin/spade-engine runs from .venv-vllm on CPU machines; not with LoRA), else
    # transformers on a CPU machine; on a GPU machine auto without vLLM is an error (say transformers to mean it).
    # timed: benchmarks only.
    backend: Literal["auto", "transformers", "scripted", "timed", "vllm"] = "auto"
    max_batch: int = 16  # requests batched into one generate call
    batch_wait_s: float = 0.05  # how long the batcher waits for more requests before generating
    script: str = ""  # scripted backend: a JSON file {"designer": [...], "hint": [...], "agent": [...]}
    threads: int = 0  # CPU threads in the worker; 0: all cores, or, when run.max_staleness > 0 overlaps it with the learner, the lower half
    concurrency: int = 32  # episodes a worker runs at once
    # The timed benchmark backend: log-normal completion lengths, a fixed time per token per request.
    timed_seconds_per_token: float = 0.001  # decode time per token per request
    timed_median_tokens: float = 300.0  # the completion length's median
    timed_sigma: float = 1.0  # the log-normal's sigma
    timed_capacity: int = 0  # sequences the timed backend decodes at once, others queue (a real server's limit); 0: unlimited
    timed_max_tokens: int = 8192  # completions are cut to this length
    # vLLM (actors/inference/vllm.py): GPUs that generate (tensor parallel; disjoint from learner.gpus; empty: GPU 0),
    # memory share reserved per GPU, KV cache GiB (0: 1 on CPU, else from the share), context limit (0: the model's).
    gpus: list[int] = msgspec.field(default_factory=list)  # the GPUs that generate
    # Where generation and training go on a GPU node (engine/protocol/placement.py; `up` prints the plan): split
    # (generation GPUs cut into groups of tensor_parallel, one worker each; training on the rest), time-shared (the
    # same GPUs, the engines asleep while the learner updates), auto (none on one GPU or at run.max_staleness = 0, else split).
    placement: Literal["auto", "split", "time-shared"] = "auto"
    tensor_parallel: int = 0  # GPUs per generation engine; 0: the fewest whose share of the weights fits (1 for most)
    device: Literal["auto", "cuda", "cpu"] = "auto"  # the transformers backend's: auto: cuda (the first of gpus, else GPU 0) when available, else cpu
    gpu_memory_utilization: float = 0.85  # the memory share reserved per GPU
    kv_cache_gb: float = 0.0  # the KV cache's size
    max_model_len: int = 0  # the context limit
    enforce_eager: bool = False  # no torch.compile / CUDA graphs: faster start, slower decode
    request_timeout_s: float = 1800.0  # one request, and a weight update (drain, reload, cache reset, resume), may
    sync_timeout_s: float = 300.0  # take this long before failing (a failed weight update fails the worker)


class WorkerConfig(Section):
    count: int = 1  # rollout workers started by `up`; 0: only workers attached by hand (`bin/spade-engine worker`)
    # The engine's worker socket; empty: ipc:// in /tmp; "tcp://0.0.0.0:5555" for other hosts (CURVE-encrypted, only
    # holders of run_dir/keys/worker.key get in; `up` prints the worker's command line).
    address: str = ""
    # The largest frame any socket of the run accepts (ZeroMQ MAXMSGSIZE; a larger one drops the sender's connection
    # unread). A paper-scale trajectory (32k tokens) is under 1 MB; policy files travel in 512 KiB chunks.
    max_message_mb: int = 16
    heartbeat_s: float = 2.0  # a worker tells the engine it is alive this often
    dead_after_s: float = 60.0  # a worker silent this long is dropped and its tasks requeued
    connect_timeout_s: float = 60.0  # a worker whose hello nobody answers in this long gives up with an error
    max_rejected: int = 3  # a worker whose results fail the engine's checks this many times is dropped (engine/peers/result_checks.py); 0: never
    # A leased task not answered within lease_factor x its own time bound (a play: sandbox.play_timeout_s +
    # inference.sync_timeout_s; a design adds inference.request_timeout_s) is taken back and sent to another worker;
    # a worker that lets max_timeouts of them pass is dropped (0: never). engine/peers/dispatch.py
    lease_factor: float = 2.0
    max_timeouts: int = 3
    # A worker that leaves a task unread over this many of its own heartbeats is dropped, its tasks requeued (it
    # heartbeats but does not read its socket; 0: never). Counted in the worker's beats, so a busy machine stretches it.
    unread_heartbeats: int = 5
    # Messages a peer may send: a burst of message_burst, refilled at max_messages_per_s and by one for each task or
    # policy chunk sent to it; a peer past it floods the engine's socket and is shed (dropped, banned for the run,
    # counted as flooding_peers; engine/peers/flood.py). max_messages_per_s = 0: no limit.
    max_messages_per_s: float = 200.0
    message_burst: int = 2000


class EvalConfig(Section):
    """`[eval]`: in-loop evaluation during `up` (engine/evaluation.py): every `every` learner updates the workers play
    a probe set with the newest policy; the plays are never stored as trajectories nor trained on, and their win
    rates go to metrics.jsonl (rows with an "eval" key) and the report."""

    every: int = 0  # evaluate every N learner updates (policy versions), and once more at the end; 0: off
    # envs: the environments in `path` (a folder of .py files, manifest.json optional; empty: the seeds), win = return > 0;
    # rg-hard: the Reasoning-Gym hard configurations of `datasets` (empty: all 100), 2 turns, win = score >= 1.
    suite: Literal["envs", "rg-hard"] = "envs"
    path: str = ""  # envs: the folder of environments
    datasets: list[str] = msgspec.field(default_factory=list)  # rg-hard: the datasets
    episodes: int = 2  # plays per environment (dataset) at each evaluation
    max_tokens: int = 0  # rg-hard: new tokens per turn; 0: play.agent_max_tokens (envs always play with [play])
    temperature: float = 0.6  # rg-hard: the SPADE evaluation's temperature (envs: play.agent_temperature)


class RlveConfig(Section):
    """`[rlve]`: the fixed-environment RLVE baseline (engine/rlve.py, `--preset rlve`): Reasoning-Gym datasets played
    as training environments, each with RLVE's sliding-window difficulty controller."""

    tasks: list[str] = msgspec.field(default_factory=list)  # Reasoning-Gym datasets played as environments; empty: off
    accuracy: float = 0.9  # tau_acc: a task's top difficulty rises once its accuracy at that difficulty reaches this
    window: int = 128  # tau_num: plays at the top difficulty that decide (then the count starts again)
    difficulty_step: int = 4  # d_Delta: problems are drawn from the top d_Delta difficulties reached (a sliding window)


class Config(Section, kw_only=True):
    """The whole run configuration: one field per `[section]`."""

    run: RunConfig = msgspec.field(default_factory=RunConfig)  # the run's length, seed, directory and logging
    model: ModelConfig = msgspec.field(default_factory=ModelConfig)  # the policy's starting model
    curriculum: CurriculumConfig = msgspec.field(default_factory=CurriculumConfig)  # skills, designs, memory
    play: PlayConfig = msgspec.field(default_factory=PlayConfig)  # episodes and sampling
    reward: RewardConfig = msgspec.field(default_factory=RewardConfig)  # the designer's reward
    learner: LearnerConfig = msgspec.field(default_factory=LearnerConfig)  # the update and its placement
    sandbox: SandboxConfig = msgspec.field(default_factory=SandboxConfig)  # where environments run
    inference: InferenceConfig = msgspec.field(default_factory=InferenceConfig)  # the workers' generation backend
    worker: WorkerConfig = msgspec.field(default_factory=WorkerConfig)  # rollout workers and their socket
    eval: EvalConfig = msgspec.field(default_factory=EvalConfig)  # in-loop evaluation
    rlve: RlveConfig = msgspec.field(default_factory=RlveConfig)  # the RLVE baseline
