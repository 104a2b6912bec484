"""The reference's values: every config field the authors' code fixes for a games run (the 4B/30B launchers), with
the section of spade-reference.md (the notes on the authors' code) that says so.

    REFERENCE["run.max_staleness"]    # (0, "§9 colocated: synchronous, every actor sample on-policy")

One table, read twice: tests/engine/protocol/test_config.py compares the resolved `--preset paper` with it field
by field, and tests/test_readme.py checks the README's deviations tables against it (a row's reference column
must be this value; a field where `paper` departs from it must have a row saying why). The presets themselves are
engine/protocol/presets.py. Left out, because they have no counterpart here: sizes (batch, workers, micro-batch
tokens) and memory settings that leave the update unchanged (`learner.activation_checkpointing`,
`learner.cpu_offload`), paths, the model, logging, and `run.seed` (the reference's corpus seed 42 seeds another
sampler over another corpus, so the number would reproduce nothing).
"""

from __future__ import annotations

# field -> (value, source). Values are written as the config holds them (floats where the field is a float).
REFERENCE: dict[str, tuple[object, str]] = {
    "run.steps": (400, "§9 rollouts"),
    "run.max_staleness": (0, "§9 colocated: synchronous, every actor sample on-policy"),
    "curriculum.skills": ([
        "Mathematical Reasoning", "Logical Deduction", "Spatial Reasoning", "Pattern Recognition", "Optimization",
        "Causal Inference",
    ], "§1 the launchers' six"),
    "curriculum.skills_per_refresh": (3, "§1 --spade-skills-per-regen 3"),
    "curriculum.envs_per_step": (24, "§9 envs/rollout"),
    "curriculum.refresh_interval": (4, "§9 regen interval / delay"),
    "curriculum.design_attempts": (5, "§4 max_attempts"),
    "curriculum.max_passage_words": (6000, "§2 documents truncated at 6000 words"),
    "curriculum.memory_capacity": (200, "§7 --spade-env-memory-max-size"),
    "curriculum.memory_positives": (2, "§2, §7 high_regret_seeds(n=2)"),
    "curriculum.memory_negatives": (1, "§2, §7 low_quality_examples(n=1)"),
    "curriculum.example_code_chars": (2000, "§2 first 2000 chars of code"),
    "curriculum.reuse_valid_envs": (False, "§4 a slot whose attempts fail stays missing"),
    "curriculum.design": (True, "§9 the SPADE launchers train a designer"),
    "curriculum.use_corpus": (True, "§2 corpus-grounded prompt"),
    "curriculum.retire_hanging_envs": (True, "§5 a step timeout blacklists the game"),
    "curriculum.revalidate": (False, "§4 one validation per attempt"),
    "curriculum.setting": ("games", "§9 games launchers"),
    "curriculum.edit_share": (0.0, "§2 every design from a fresh passage (edits are this engine's)"),
    "play.plays_per_env": (8, "§5 192 / 24"),
    "play.hint_plays_per_env": (16, "§3 --spade-hint-plays-per-game 16"),
    "play.hint_plays": ("refresh", "§3 only at regeneration steps, for new games"),
    "play.group_seeds": ("distinct", "§5 each training play resets without a seed"),
    "play.train_hint_plays": (False, "§6 the batch is the unhinted plays"),
    "play.end_on_cutoff": (True, "§5 a reply without EOS ends the episode"),
    "play.max_turns": (25, "§5"),
    "play.agent_max_tokens": (8192, "§5"),
    "play.agent_temperature": (0.6, "§9"),
    "play.agent_prompt": ("reason", "§5 reason step by step, then \\boxed{}"),
    "play.agent_prefill": ("", "§5 no prefill"),
    "play.stop_at_action": (False, "§5 a reply ends at EOS or the token limit"),
    "play.designer_max_tokens": (16384, "§2 4B/30B"),
    "play.designer_temperature": (0.6, "§2"),
    "play.designer_prefill": ("", "§2 the prompt asks for a ```python block; the reply starts free"),
    "play.hint_max_tokens": (4096, "§3 games"),
    "play.hint_temperature": (0.3, "§3"),
    "play.hint_attempts": (3, "§3"),
    "play.hint_retry_backoff_s": (1.0, "§3 1/2/4 s backoff"),
    "play.partial_rewards": (True, "§2 partial progress in [0, 1]"),
    "play.quality_checks": (False, "§4 the reference's checks only"),
    "play.top_p": (0.95, "§2, §9"),
    "play.top_k": (20, "§2, §9"),
    "play.tool_timeout_s": (30.0, "§8 execute_tool 30 s"),
    "play.max_context_tokens": (32768, "§5"),
    "reward.designer_reward": ("blend", "§6 all paper SPADE runs"),
    "reward.regret_floor": (0.15, "§6 --spade-regret-floor"),
    "reward.regret_weight": (0.4, "§6"),
    "reward.plateau_weight": (0.6, "§6"),
    "reward.plateau_low": (0.4, "§6"),
    "reward.plateau_high": (0.6, "§6"),
    "reward.plateau_ramp": (0.25, "§6"),
    "reward.win_rate": ("mean_return", "§6 mean of all plays in the window"),
    "reward.progress_gamma": (0.85, "§6 gamma_slow"),
    "reward.hang_penalty": (-0.5, "§6 STEP_TIMEOUT_PENALTY"),
    "reward.hang_penalty_every_variant": (False, "§6 the blend recompute ignores the flag"),
    "reward.designer_scale": (0.0, "§6 compute_env_reward_scale"),
    "reward.designer_advantage": ("centred", "§6 per-skill mean-centering, no std"),
    "reward.train_designer": (True, "§11 only the ablation freezes it"),
    "learner.learning_rate": (1e-6, "§9"),
    "learner.lora_rank": (0, "§9 full-parameter Megatron training, no adapter"),
    "learner.weight_decay": (0.1, "§9"),
    "learner.betas": ([0.9, 0.98], "§9"),
    "learner.lr_schedule": ("constant", "§9"),
    "learner.warmup_steps": (0, "§9 constant"),
    "learner.loss_aggregation": ("sample_mean", "§6 one batch of 192 samples, both roles"),
    "learner.designer_weight": (1.0, "§6 no role weights"),
    "learner.agent_weight": (1.0, "§6 no role weights"),
    "learner.objective.name": ("tis", "§9 --use-tis"),
    "learner.objective.clip_low": (0.2, "§9 eps_clip"),
    "learner.objective.clip_high": (0.28, "§9 clip_high"),
    "learner.objective.tis_cap": (2.0, "§9 Slime's tis_clip"),
    "learner.objective.seq_filter": (False, "§9 no sequence filter"),
    "learner.objective.kl_coef": (0.0, "§9 games 4B/30B"),
    "sandbox.step_timeout_s": (30.0, "§5 env.step timeout"),
    "sandbox.episode_timeout_s": (300.0, "§5 per-play timeout"),
}
