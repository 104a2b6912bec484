"""Environment memory queries: the designer's positive and negative examples (spade-reference.md §7).

Positives: same skill, win rate in [0.15, 0.85], the top max(3n, 10) by regret, n drawn at random.
Negatives: same skill, win rate above 0.9 or below 0.1, drawn at random. Capacity is FIFO by step. Both are drawn
from the records of one setting (games or tool_use; a record without one is a games record).
"""

from __future__ import annotations

import random

from engine.protocol.messages import MemoryExample
from storage.records import MemoryRecord

LEARNABLE_LOW, LEARNABLE_HIGH = 0.15, 0.85
TOO_EASY, TOO_HARD = 0.9, 0.1


def positive_examples(records: list[MemoryRecord], skill: str, n: int, rng: random.Random, code_chars: int,
                      setting: str = "games") -> list[MemoryExample]:
    learnable = [r for r in records if r.skill == skill and r.setting == setting and LEARNABLE_LOW <= r.win_rate <= LEARNABLE_HIGH]
    learnable.sort(key=lambda r: (-r.regret, r.env_id))
    pool = learnable[: max(3 * n, 10)]
    chosen = rng.sample(pool, min(n, len(pool)))
    return [
        MemoryExample(skill=r.skill, win_rate=r.win_rate, regret=r.regret, code=r.code[:code_chars], name=r.name, env_id=r.env_id)
        for r in chosen
    ]


def negative_lines(records: list[MemoryRecord], skill: str, n: int, rng: random.Random, setting: str = "games") -> list[str]:
    bad = [r for r in records if r.skill == skill and r.setting == setting and (r.win_rate > TOO_EASY or r.win_rate < TOO_HARD)]
    bad.sort(key=lambda r: r.env_id)
    chosen = rng.sample(bad, min(n, len(bad)))
    return [
        f"{'too easy' if r.win_rate > TOO_EASY else 'too hard'} (win_rate={r.win_rate:.2f}): class {r.name}"
        for r in chosen
    ]


def evicted(records: list[MemoryRecord], capacity: int) -> list[str]:
    """env_ids to drop so that at most `capacity` records remain, oldest first (seeds are never evicted)."""
    designed = sorted((r for r in records if r.source == "designed"), key=lambda r: (r.step, r.env_id))
    excess = len(records) - capacity
    return [r.env_id for r in designed[: max(0, excess)]]
