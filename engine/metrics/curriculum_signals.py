"""The paper's curriculum signals, measured by the engine at every step and merged into its metrics.jsonl row.

    row |= curriculum_metrics(store, paths, step, refresh, plays, trained_at=version, seconds=s)   # run.py finish_step

What a row gains (the step's learnable share itself is engine/metrics/steps.py's):
- validation: `designs`, `validation_pass_rate` (valid designs over design attempts at this step's refresh) and
  `rejection_reasons` (failed check -> count; "worker error" for a task that failed);
- diversity: `vendi_envs` / `vendi_envs_per_n` over the environments played at the step (each embedded as its
  class name, docstring and reset() text: engine/metrics/formula_reveal.py `describe`),
  `vendi_memory` / `vendi_memory_per_n` over the environment memory, `near_duplicates` (this refresh's designs whose
  cosine similarity to a memory entry of an earlier step reaches `NEAR_DUPLICATE`), `max_memory_similarity`, and
  `embedding`, the model the vectors came from (engine/metrics/embeddings.py);
- formula reveal (engine/metrics/formula_reveal.py): `formula_reveal_rate` over the environments designed at this refresh,
  each judged on the first observation of its first unhinted play (decoded with the run's tokenizer; the string
  literals of reset() without one) against its hint and answers (solution()'s constants and the last action of a
  won play);
- rewards: `reward_levels` (distinct turn rewards per environment, mean over the environments played),
  `partial_reward_levels` (distinct ones strictly between 0 and 1), `partial_reward_turns` (turns with such a reward);
- `win_rate_by_skill` (unhinted plays won, by skill), `sample_staleness_mean` / `_max` (versions between the
  newest token of a play's sample and the version that trains it: `trained_at` minus the oldest version sampled),
  `tokens_agent`, `tokens_designer` and `tokens_per_s_agent` / `_designer` (role tokens over the step's seconds).
The formulas (Vendi, granularity) are plain functions, unit-tested with known answers.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np

from engine.metrics.embeddings import open_embedder
from engine.metrics.formula_reveal import describe, formula_reveal, reset_text, solution_literals
from engine.protocol.messages import PlayResult, unpack_ints, unpack_mask
from engine.protocol.paths import RunPaths
from engine.rewards import mean, win_rate
from engine.metrics.observations import first_observation, load_tokenizer, prompt_text

NEAR_DUPLICATE = 0.95  # cosine similarity at which a design counts as a near-duplicate of a memory entry


def vendi_score(vectors: np.ndarray) -> float:
    """exp of the Shannon entropy of the eigenvalues of K / n, K the cosine-similarity matrix of the rows: 1 for n
    identical items, n for n orthogonal ones (Friedman and Dieng's Vendi score)."""
    x = np.asarray(vectors, dtype=np.float64)
    n = len(x)
    if n == 0:
        return 0.0
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = x / np.where(norms > 0, norms, 1.0)
    eigenvalues = np.linalg.eigvalsh(x @ x.T / n)
    p = eigenvalues[eigenvalues > 1e-12]
    return float(math.exp(-np.sum(p * np.log(p))))


def max_similarities(new: np.ndarray, reference: np.ndarray) -> list[float]:
    """For each row of `new`, its largest cosine similarity to a row of `reference` (rows of unit length)."""
    if len(new) == 0 or len(reference) == 0:
        return [0.0] * len(new)
    return [float(s) for s in (np.asarray(new) @ np.asarray(reference).T).max(axis=1)]


def reward_levels(rewards) -> int:
    """Distinct reward values (to 1e-6) among `rewards`."""
    return len({round(float(r), 6) for r in rewards})


def partial_levels(rewards) -> int:
    """Distinct reward values strictly between 0 and 1: partial credit."""
    return len({round(float(r), 6) for r in rewards if 0.0 < r < 1.0})


def rejection_reason(reason: str) -> str:
    """The check a rejected design failed, from its stored reason ("single_env_class: ..." -> single_env_class)."""
    if reason.startswith("worker error"):
        return "worker error"
    return reason.split(":", 1)[0].strip() or "unknown"


def validation_metrics(designs: list) -> dict:
    rejected = Counter(rejection_reason(e.reason) for e in designs if not e.valid)
    valid = sum(1 for e in designs if e.valid)
    return {
        "designs": len(designs),
        "validation_pass_rate": valid / len(designs) if designs else None,
        "rejection_reasons": dict(rejected.most_common()),
    }


def diversity_metrics(env_codes: dict[str, str], memory: dict[str, tuple[int, str]], new_ids: list[str], step: int) -> dict:
    """Vendi over the step's environments and over the memory; near-duplicates of the new designs in the memory
    (entries of earlier steps: this refresh's own designs are in the memory already)."""
    embedder = open_embedder()
    envs = embedder.embed([describe(code) for code in env_codes.values()])
    mem_ids = list(memory)
    mem = embedder.embed([describe(memory[i][1]) for i in mem_ids])
    earlier = [j for j, i in enumerate(mem_ids) if memory[i][0] < step and i not in new_ids]
    new = embedder.embed([describe(env_codes[i]) for i in new_ids if i in env_codes])
    sims = max_similarities(new, mem[earlier] if earlier else mem[:0])
    return {
        "embedding": embedder.name,
        "vendi_envs": vendi_score(envs),
        "vendi_envs_per_n": vendi_score(envs) / len(envs) if len(envs) else None,
        "vendi_memory": vendi_score(mem),
        "vendi_memory_per_n": vendi_score(mem) / len(mem) if len(mem) else None,
        "near_duplicates": sum(1 for s in sims if s >= NEAR_DUPLICATE),
        "max_memory_similarity": max(sims) if sims else None,
    }


def reward_metrics(plays: list) -> dict:
    """Granularity over the environments played: every turn reward of every play that did not fail."""
    by_env: dict[str, list[float]] = defaultdict(list)
    for play in plays:
        if play.status != "failed":
            by_env[play.env_id] += [t.reward for t in play.turns]
    rewards = [r for values in by_env.values() for r in values]
    return {
        "reward_levels": mean([reward_levels(v) for v in by_env.values()]) if by_env else None,
        "partial_reward_levels": mean([partial_levels(v) for v in by_env.values()]) if by_env else None,
        "partial_reward_turns": sum(1 for r in rewards if 0.0 < r < 1.0),
    }


def skill_win_rates(plays: list, skills: dict[str, str]) -> dict[str, float]:
    by_skill: dict[str, list[float]] = defaultdict(list)
    for play in plays:
        if play.status != "failed" and play.arm == "no_hint":
            by_skill[skills.get(play.env_id, "?")].append(play.episode_return)
    return {skill: win_rate(returns) for skill, returns in sorted(by_skill.items())}


def staleness(plays: list[PlayResult], trained_at: int) -> dict:
    lags = []
    for play in plays:
        versions = unpack_ints(play.agent.versions)[unpack_mask(play.agent.loss_mask) == 1]
        versions = versions[versions >= 0]
        if versions.size:
            lags.append(trained_at - int(versions.min()))
    return {"sample_staleness_mean": mean(lags) if lags else None, "sample_staleness_max": max(lags) if lags else None}


def reveal_metrics(envs: list, plays: list[PlayResult], tokenizer) -> dict:
    """Formula reveal over `envs` (the designs of this refresh that were played)."""
    first: dict[str, PlayResult] = {}
    for play in plays:
        if play.arm == "no_hint" and play.status != "failed":
            first.setdefault(play.env_id, play)
    flagged = checked = 0
    examples = []
    for env in envs:
        play = first.get(env.env_id)
        text = first_observation(prompt_text(play.agent, tokenizer)) if play is not None and tokenizer is not None else ""
        text = text or reset_text(env.code)
        if not text:
            continue
        answers = solution_literals(env.code)
        if play is not None and play.turns and play.episode_return >= 1.0:
            answers.append(play.turns[-1].action)
        checked += 1
        reveal = formula_reveal(text, env.hint, answers)
        if reveal:
            flagged += 1
            examples.append(f"{env.env_id}: {'answer ' + reveal.answer if reveal.answer else 'method ' + reveal.method}")
    return {
        "formula_reveal_rate": flagged / checked if checked else None,
        "formula_reveals": flagged,
        "formula_reveal_examples": examples[:5],
    }


def curriculum_metrics(store, paths: RunPaths, step: int, refresh, plays: list[PlayResult], *, trained_at: int, seconds: float) -> dict:
    """Everything above for one step; reads the store (this step's designs and the memory), writes nothing."""
    active = refresh.active
    designs = [e for e in store.environments() if e.source == "designed" and e.step_created == step] if refresh.requested else []
    memory = {r.env_id: (r.step, r.code) for r in store.memory()}
    new = [e for e in active if e.designed_now]
    try:
        tokenizer = load_tokenizer(paths.read_model_path())
    except (OSError, KeyError, ValueError):  # run.json unreadable or without a model path: literals instead
        tokenizer = None
    agent_tokens = sum(p.tokens_generated for p in plays)
    return {
        **validation_metrics(designs),
        **diversity_metrics({e.env_id: e.code for e in active}, memory, [e.env_id for e in new], step),
        **reveal_metrics(new, plays, tokenizer),
        **reward_metrics(plays),
        "win_rate_by_skill": skill_win_rates(plays, {e.env_id: e.skill for e in active}),
        **staleness(plays, trained_at),
        "tokens_agent": agent_tokens,
        "tokens_designer": refresh.tokens,
        "tokens_per_s_agent": agent_tokens / seconds if seconds > 0 else 0.0,
        "tokens_per_s_designer": refresh.tokens / seconds if seconds > 0 else 0.0,
    }
