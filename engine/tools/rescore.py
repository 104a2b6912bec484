"""`bin/spade-engine replay RUN_DIR --rescore [--set reward.designer_reward=regret ...]`: the run's rewards,
advantages and step metrics recomputed from its stored plays under a changed config, without touching the run.

    rows = rescore(store, config)       # "step" rows (agent advantages and win rates), "designer_reward" rows
    write_rows(rows, out)               # JSONL; printed as tables by `replay --rescore`

The same code as the live run: agent advantages are z-scores within each (environment, arm) group of a step's
plays (engine/batches.py `advantage_groups`; hinted plays only with `play.train_hint_plays`); each valid design made
at a refresh step gets its designer reward from the plays of its k-step window by engine/designer_reward.py
`score_window` (regret at the refresh step or over the window, the blend's plateau, learning progress against the
skill EMAs of the rescored earlier windows, the hang penalty; a last window the run's end cut short, as the run
rewarded it, over the steps played), centred per skill and scaled by the agent samples its
reward step's stored batch trained. A "designer_reward" row keeps the stored values beside the new ones
(`stored_raw_reward`, `stored_advantage`): with the run's own config the two agree (tests/engine/tools/test_rescore.py).
Only the store is read (bad records are skipped and reported); the output goes to a file of the caller's choice.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from engine.batches import advantage_groups
from engine.designer_reward import History, score_window
from engine.protocol.config import Config
from engine.rewards import learnable, mean, returns_by_group, win_rate
from storage.records import StoredRecordError
from storage.scan import tolerant
from storage.store import Store, trajectory_key


def step_row(step: int, plays: list, train_hint: bool) -> dict:
    """One step's agent advantages and win rates from its stored plays (agent TrajectoryRecords, in key order)."""
    advantages = [
        {"sample_id": p.sample_id, "env_id": env_id, "arm": arm, "return": p.episode_return, "advantage": a}
        for (env_id, arm), members, values in advantage_groups(plays, train_hint=train_hint)
        for p, a in zip(members, values)
    ]
    groups = returns_by_group(plays)
    by_arm: dict[str, list[float]] = defaultdict(list)
    for (_, arm), returns in groups.items():
        by_arm[arm] += returns
    env_win = [win_rate(r) for (_, arm), r in groups.items() if arm == "no_hint"]
    return {
        "kind": "step", "step": step, "plays": len(plays),
        "win_rate_no_hint": win_rate(by_arm["no_hint"]), "win_rate_hint": win_rate(by_arm["hint"]),
        "mean_return_no_hint": mean(by_arm["no_hint"]), "mean_return_hint": mean(by_arm["hint"]),
        "mean_regret": mean(by_arm["hint"]) - mean(by_arm["no_hint"]) if by_arm["hint"] else 0.0,
        "learnable_share": mean([1.0 if learnable(w) else 0.0 for w in env_win]),
        "agent_samples": len(advantages), "agent_advantages": advantages,
    }


def rescore(store: Store, config: Config, skipped: list[StoredRecordError]) -> list[dict]:
    k, reward = config.curriculum.refresh_interval, config.reward
    plays: dict[int, list] = defaultdict(list)
    for t in tolerant(store, "trajectories", skipped):
        if t.role == "agent":
            plays[t.step].append(t)
    envs = [e for e in tolerant(store, "environments", skipped) if e.source == "designed" and e.valid]
    stored = {r.env_id: r for r in tolerant(store, "designer_rewards", skipped)}
    agent_trained: dict[int, int] = defaultdict(int)  # agent samples each step's stored batch trained
    for batch in tolerant(store, "batches", skipped):
        keys = {trajectory_key(p.step, p.sample_id) for p in plays.get(batch.step, ())}
        agent_trained[batch.step] += sum(1 for e in batch.entries if e.trajectory_key in keys)
    rows = [step_row(step, plays[step], config.play.train_hint_plays) for step in sorted(plays)]
    history: History = []  # the rescored earlier windows, for learning progress's EMA
    last = max(plays, default=-1)
    for env_step in range(0, last + 1, k):
        end = env_step + k - 1
        if end > last:  # a window the run's end cut short: rewarded over the steps played, if the run did so
            if not any(r.env_step == env_step and r.reward_step < env_step + k for r in stored.values()):
                continue  # not rewarded (yet): the run was interrupted, or goes on
            end = last
        samples = agent_trained.get(end) or next((r["agent_samples"] for r in rows if r["step"] == end), 0)
        made = [e for e in envs if e.step_created == env_step]
        score = score_window(reward, k, env_step, made, {s: plays.get(s, []) for s in range(env_step, end + 1)}, history, samples)
        history += score.history
        for d in score.designs:
            old = stored.get(d.env.env_id)
            rows.append({
                "kind": "designer_reward", "env_id": d.env.env_id, "skill": d.env.skill, "env_step": env_step,
                "reward_step": end + 1, "variant": reward.designer_reward, "regret": d.regret, "win_rate": d.win_rate,
                "raw_reward": d.raw_reward, "advantage": d.advantage, "scale": score.scale,
                "stored_variant": old.variant if old else None, "stored_raw_reward": old.raw_reward if old else None,
                "stored_advantage": old.advantage if old else None,
            })
    return rows


def write_rows(rows: list[dict], out: Path) -> None:
    with open(out, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def summary_lines(rows: list[dict]) -> list[str]:
    lines = ["step  plays  win(no hint)  win(hint)  regret  learnable  agent samples"]
    for r in (r for r in rows if r["kind"] == "step"):
        lines.append(
            f"{r['step']:>4}  {r['plays']:>5}  {r['win_rate_no_hint']:>12.3f}  {r['win_rate_hint']:>9.3f}  "
            f"{r['mean_regret']:>+6.3f}  {r['learnable_share']:>9.3f}  {r['agent_samples']:>13}"
        )
    designers = [r for r in rows if r["kind"] == "designer_reward"]
    if designers:
        lines.append("designer rewards: env  variant  regret  win  reward (stored)  advantage (stored)")
        for r in designers:
            old_raw = "-" if r["stored_raw_reward"] is None else f"{r['stored_raw_reward']:.4f}"
            old_adv = "-" if r["stored_advantage"] is None else f"{r['stored_advantage']:+.4f}"
            lines.append(
                f"  {r['env_id']}  {r['variant']}  {r['regret']:+.4f}  {r['win_rate']:.3f}  {r['raw_reward']:.4f} ({old_raw})  "
                f"{r['advantage']:+.4f} ({old_adv})"
            )
    return lines
