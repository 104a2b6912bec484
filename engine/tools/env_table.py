"""One row per stored environment with how it did: what `inspect` lists and the report ranks.

    rows, skipped = environment_rows(store)        # EnvRow per environment; bad records skipped, named in `skipped`
    sort_rows(rows, "regret", descending=True)

Win rates per arm are over every agent play of the environment (the share with return > 0); regret is the stored
designer reward's (its definition depends on `reward.designer_reward`), else the hinted minus the unhinted mean
return of its plays (None without hinted plays). `parent` is the environment an edit started from, shown when the
record has such a field (older stores do not).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from engine.rewards import mean, win_rate
from storage.records import StoredRecordError
from storage.scan import tolerant
from storage.store import Store, trajectory_key


@dataclass
class EnvRow:
    env_id: str
    skill: str
    step: int
    source: str
    valid: bool
    verdict: str  # valid | rejected: CHECK | retired
    parent: str = ""
    hint: str = ""
    plays: dict[str, int] = field(default_factory=dict)  # arm -> plays that did not fail
    win: dict[str, float | None] = field(default_factory=dict)  # arm -> win rate
    regret: float | None = None
    designer_reward: float | None = None
    first_play: str = ""  # the key of its first unhinted play (for a transcript)


def verdict(record) -> str:
    if not record.valid:
        return f"rejected: {record.reason.split(':', 1)[0]}" if record.reason else "rejected"
    return "retired" if record.reason.startswith("retired:") else "valid"


def parent_of(record) -> str:
    for name in ("parent_env_id", "parent_id", "parent"):
        value = getattr(record, name, None)
        if value:
            return str(value)
    return ""


def environment_rows(store: Store, skipped: list[StoredRecordError] | None = None) -> list[EnvRow]:
    skipped = [] if skipped is None else skipped
    returns: dict[tuple[str, str], list[float]] = defaultdict(list)
    first: dict[str, str] = {}
    for t in tolerant(store, "trajectories", skipped):
        if t.role != "agent":
            continue
        if t.arm == "no_hint":
            first.setdefault(t.env_id, trajectory_key(t.step, t.sample_id))
        if t.status != "failed":
            returns[(t.env_id, t.arm)].append(t.episode_return)
    rewards = {r.env_id: r for r in tolerant(store, "designer_rewards", skipped)}
    rows = []
    for e in tolerant(store, "environments", skipped):
        no_hint, hint = returns.get((e.env_id, "no_hint"), []), returns.get((e.env_id, "hint"), [])
        reward = rewards.get(e.env_id)
        regret = reward.regret if reward else (mean(hint) - mean(no_hint) if hint and no_hint else None)
        rows.append(EnvRow(
            env_id=e.env_id, skill=e.skill, step=e.step_created, source=e.source, valid=e.valid, verdict=verdict(e),
            parent=parent_of(e), hint=e.hint, plays={"no_hint": len(no_hint), "hint": len(hint)},
            win={"no_hint": win_rate(no_hint) if no_hint else None, "hint": win_rate(hint) if hint else None},
            regret=regret, designer_reward=reward.raw_reward if reward else None, first_play=first.get(e.env_id, ""),
        ))
    return rows


SORT_KEYS = {
    "step": lambda r: (r.step, r.env_id),
    "skill": lambda r: (r.skill, r.step, r.env_id),
    "regret": lambda r: (r.regret is not None, r.regret or 0.0, r.env_id),
    "reward": lambda r: (r.designer_reward is not None, r.designer_reward or 0.0, r.env_id),
    "win": lambda r: (r.win.get("no_hint") is not None, r.win.get("no_hint") or 0.0, r.env_id),
    "verdict": lambda r: (r.verdict, r.step, r.env_id),
}


def sort_rows(rows: list[EnvRow], key: str, descending: bool = False) -> list[EnvRow]:
    return sorted(rows, key=SORT_KEYS[key], reverse=descending)
