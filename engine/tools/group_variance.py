"""Where a run's reward variance comes from. GRPO learns only from groups whose returns differ; this tells apart
the groups that differ because a play departed from the format example the game printed (`Answer as \\boxed{e}`:
the 135M model copies it) from those whose plays all copied their example and still differ, which is the luck of
the instances (`play.group_seeds = "distinct"` gives each play its own, so its own random example).

    plays = read_plays(paths)             # the unhinted agent plays of the run's store, with what each copied
    variance_sources(plays)               # {"groups", "with_variance", "all_copied", "with_departure", "no_example", "copy_share"}

bin/bench learning reports it for each run (the designer's side table). A group with variance where no play departed
from a printed example but some play had none to copy (a designed game may print none) counts as `no_example`;
`copy_share` is over the plays that had one.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from engine.metrics.observations import first_observation, load_tokenizer, prompt_text
from engine.protocol.paths import RunPaths
from storage.scan import trajectories
from storage.store import Store

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


@dataclass(frozen=True)
class GroupPlay:
    env_id: str
    step: int
    copied: bool | None  # the first action was the printed example; None: the observation printed none
    episode_return: float


def printed_example(observation: str) -> str | None:
    """The first non-empty boxed example an observation prints, or None."""
    found = [e.strip() for e in _BOXED.findall(observation) if e.strip()]
    return found[0] if found else None


def variance_sources(plays: list[GroupPlay]) -> dict:
    """Counts over the groups (one environment at one step): how many had reward variance, and of those how many
    had every play copy its example (the variance is the instances', not the model's choice), a play depart from its
    example, or neither (a play with no example to copy)."""
    groups: dict[tuple[str, int], list[GroupPlay]] = defaultdict(list)
    for play in plays:
        groups[(play.env_id, play.step)].append(play)
    varied = [g for g in groups.values() if len(g) > 1 and len({p.episode_return for p in g}) > 1]
    all_copied = sum(all(p.copied for p in g) for g in varied)
    departed = sum(any(p.copied is False for p in g) for g in varied)
    with_example = [p for p in plays if p.copied is not None]
    return {
        "groups": len(groups), "with_variance": len(varied), "all_copied": all_copied, "with_departure": departed,
        "no_example": len(varied) - all_copied - departed,
        "copy_share": round(sum(bool(p.copied) for p in with_example) / len(with_example), 4) if with_example else None,
    }


def read_plays(paths: RunPaths, steps: range | None = None) -> list[GroupPlay]:
    """The run's unhinted agent plays that ended (completed or truncated), each with whether its first action copied
    its first observation's example. [] when the run's tokenizer cannot be read (no prompt text to look in)."""
    tokenizer = load_tokenizer(paths.read_model_path())
    if tokenizer is None:
        return []
    skipped: list = []
    store = Store.open(paths.store, readonly=True)
    try:
        out = []
        for t in trajectories(store, skipped):
            if t.role != "agent" or t.arm != "no_hint" or t.status not in ("completed", "truncated") or not t.turns:
                continue
            if steps is not None and t.step not in steps:
                continue
            example = printed_example(first_observation(prompt_text(t.sample, tokenizer)))
            action = t.turns[0].action  # what env.step got: the reply's boxed answer as the model wrote it
            copied = None if example is None else (printed_example(action) or action.strip()) == example
            out.append(GroupPlay(env_id=t.env_id, step=t.step, copied=copied, episode_return=t.episode_return))
        return out
    finally:
        store.close()
