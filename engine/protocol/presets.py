"""The presets `--preset NAME[,NAME...]` names: overlays of config data (plain dicts, as a TOML file would give)
merged left to right over the defaults by engine/protocol/config_loading.py (`resolve_preset`).

    default      the schema's defaults (engine/protocol/config.py), sized for 2 CPU cores
    paper        the paper's schedule and the reference code's choices, every value spelled out (synchronous)
    paper-async  paper with this engine's asynchrony: run.max_staleness = 4
    ABLATIONS    the paper's ablations, each an overlay that changes only what it removes
    rlve         the fixed-environment RLVE baseline: Reasoning-Gym tasks, sliding-window difficulty
    tool-use     the tool-use setting at the reference's 8B/30B schedule
"""

from __future__ import annotations

# The Reasoning-Gym datasets of the default RLVE run: ones with a difficulty curriculum, across the four families.
RLVE_TASKS = [
    "basic_arithmetic", "chain_sum", "gcd", "lcm", "prime_factorization", "fraction_simplification", "leg_counting",
    "number_sorting", "spell_backward", "letter_counting", "word_sorting", "base_conversion", "count_bits",
    "binary_alternation", "number_filtering", "caesar_cipher", "mini_sudoku", "maze", "tower_of_hanoi",
    "propositional_logic", "syllogism", "arc_1d", "color_cube_rotation", "number_sequence",
]


# `--preset rlve` (the reference's train_fixed_rlve_* launchers: no designer, actor temperature 1.0; every step a
# refresh, so that each step's problems are drawn at the controller's newest difficulties). `paper,rlve` is the
# paper-scale run (add --set curriculum.envs_per_step=16 --set play.plays_per_env=16 for the launchers' 16 x 16).
RLVE_PRESET = {
    "curriculum": {"design": False, "refresh_interval": 1},
    "play": {"agent_temperature": 1.0, "hint_plays_per_env": 0, "max_turns": 2},
    "reward": {"train_designer": False},
    "rlve": {"tasks": RLVE_TASKS},
}


# The paper's schedule and the reference code's choices (spade-reference.md sections 1-9), every value the
# reference fixes spelled out, so that a change of a default does not change the paper preset; the table of those
# values, with their sources, is engine/protocol/reference.py (REFERENCE), and the tests hold the two equal but for
# the departures README lists. Synchronous, as the reference (it trains colocated): `paper-async` adds the bound.
PAPER = {
    "run": {"steps": 400, "max_staleness": 0},
    "curriculum": {
        "skills": ["Mathematical Reasoning", "Logical Deduction", "Spatial Reasoning", "Pattern Recognition",
                   "Optimization", "Causal Inference"],
        "skills_per_refresh": 3, "envs_per_step": 24, "refresh_interval": 4, "design_attempts": 5,
        "max_passage_words": 6000, "memory_capacity": 200, "memory_positives": 2, "memory_negatives": 1,
        "example_code_chars": 2000, "reuse_valid_envs": False, "retire_hanging_envs": True,
        "design": True, "use_corpus": True, "setting": "games",
        "edit_share": 0.0,  # every design written from scratch (edit tasks are beyond the reference)
        # The reference validates once. Kept on: a worker's verdict is a peer's claim (engine/revalidate.py), and
        # an honest worker's second validation agrees, so it changes what is learnt only for a flaky design.
        "revalidate": True,
    },
    "play": {
        "plays_per_env": 8, "hint_plays_per_env": 16, "hint_plays": "refresh", "train_hint_plays": False,
        "max_turns": 25, "agent_max_tokens": 8192, "agent_temperature": 0.6, "end_on_cutoff": True,
        "designer_max_tokens": 16384, "designer_temperature": 0.6, "hint_max_tokens": 4096, "hint_temperature": 0.3,
        "hint_attempts": 3, "hint_retry_backoff_s": 1.0, "partial_rewards": True, "quality_checks": False,
        "top_p": 0.95, "top_k": 20, "max_context_tokens": 32768, "agent_prompt": "reason", "agent_prefill": "",
        "designer_prefill": "", "tool_timeout_s": 30.0, "stop_at_action": False, "group_seeds": "distinct",
    },
    "reward": {
        "designer_reward": "blend", "regret_floor": 0.15, "regret_weight": 0.4, "plateau_weight": 0.6,
        "plateau_low": 0.4, "plateau_high": 0.6, "plateau_ramp": 0.25, "win_rate": "mean_return",
        "progress_gamma": 0.85, "hang_penalty": -0.5, "hang_penalty_every_variant": False, "designer_scale": 0.0,
        "designer_advantage": "centred", "train_designer": True,
    },
    "learner": {
        "learning_rate": 1e-6, "weight_decay": 0.1, "betas": [0.9, 0.98], "lr_schedule": "constant",
        "lora_rank": 0,  # full-parameter training
        "warmup_steps": 0, "loss_aggregation": "sample_mean", "designer_weight": 1.0, "agent_weight": 1.0,
        "micro_batch_tokens": 32768,  # a whole 32k-token episode fits one micro-batch (longer samples are refused)
        # Recompute each layer's activations in backward (the update is unchanged): a 32k-token Qwen3-4B micro-batch
        # keeps ~200 GiB of activations per GPU without it, ~12 GiB with it (learner/memory_plan.py).
        "activation_checkpointing": True,
        "objective": {"name": "tis", "clip_low": 0.2, "clip_high": 0.28, "tis_cap": 2.0, "seq_filter": False,
                      "kl_coef": 0.0},
    },
    "inference": {"max_batch": 256, "concurrency": 256},
    "sandbox": {"workers": 256, "step_timeout_s": 30.0, "episode_timeout_s": 300.0},
}

# `--preset paper-async`: the paper preset with this engine's asynchrony, not the reference's: plays start while the
# learner is up to 4 versions behind (AReaL's and SkyRL's bound, async-rl.md), so a designer sample trains up to
# k + 4 = 8 versions after it was sampled (the reference's: k).
PAPER_ASYNC = {**PAPER, "run": {**PAPER["run"], "max_staleness": 4}}

# The paper's ablations (spade-reference.md section 11), each an overlay that changes only what it removes.
ABLATIONS = {
    "no-corpus": {"curriculum": {"use_corpus": False}},  # the designer writes with no passage
    # no memory examples in the prompt (nor an edit task's remembered parent)
    "no-memory": {"curriculum": {"memory_positives": 0, "memory_negatives": 0, "edit_share": 0.0}},
    "frozen-designer": {"reward": {"train_designer": False}},  # designs still made and rewarded, never trained
    "solve-rate": {"reward": {"designer_reward": "blend", "regret_weight": 0.0, "plateau_weight": 1.0}},
    "learning-progress": {"reward": {"designer_reward": "learning_progress"}},
    "two-skills": {"curriculum": {"skills": ["Mathematical Reasoning", "Pattern Recognition"], "skills_per_refresh": 2}},
    # No designer: a fixed pool sampled without replacement (--set curriculum.fixed_envs=DIR; empty: the seeds).
    "fixed-envs": {"curriculum": {"design": False}},
}


# The tool-use setting's skills (spade-reference.md §1) and its schedule, the reference's 8B/30B tool-use launchers
# (§9): 24 environments, 8 plays + 16 hinted plays each, regeneration interval and designer delay 8, blend reward,
# KL 0.005, all six skills active. `up --setting tool-use` sets only the setting and the skills.
TOOL_USE_SKILLS = ["API Orchestration", "Data Retrieval", "State Modification", "Error Recovery", "Tool Selection",
                   "Multi-Step Workflows"]
TOOL_USE_PRESET = {
    "curriculum": {"setting": "tool_use", "skills": TOOL_USE_SKILLS, "skills_per_refresh": 6, "envs_per_step": 24,
                   "refresh_interval": 8, "design_attempts": 5, "max_passage_words": 4000},
    "play": {"plays_per_env": 8, "hint_plays_per_env": 16, "max_turns": 25, "tool_timeout_s": 30.0},
    "reward": {"designer_reward": "blend"},
    "learner": {"objective": {"kl_coef": 0.005}},
}


# `--preset NAME[,NAME...]`: the presets merge left to right over the defaults. The ablations (spade-reference.md
# section 11) are overlays that change only what the ablation removes, so alone they run at the default's CPU size
# and `--preset paper,NAME` is the paper-scale ablation (`paper,frozen-designer,no-memory` is the paper's
# "no designer training, no memory" arm).
PRESETS: dict[str, dict] = {
    "default": {},
    "paper": PAPER,
    "paper-async": PAPER_ASYNC,  # the paper preset with the staleness bound 4 (this engine's asynchrony)
    **ABLATIONS,
    "rlve": RLVE_PRESET,  # the fixed-environment RLVE baseline: Reasoning-Gym tasks, sliding-window difficulty
    "tool-use": TOOL_USE_PRESET,  # the tool-use setting at the reference's 8B/30B schedule
}
