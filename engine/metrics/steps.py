"""What a step did, as one row of `metrics.jsonl` once its update lands, and the live view's line for it.

    row = step_metrics(StepOutcome(...), k=..., env_slots=..., isolation=...)   # plays, wins, samples, tokens
    row["learnable_share_window"] = window_share(rows_by_step, first, step)     # the paper's Figure 6 share
    log = MetricsLog(paths.metrics)
    log.write(row, learner_metrics, policy_version)                             # when PolicyPublished arrives

Learnable: an environment whose unhinted plays at the step won (return > 0) a share in [0.2, 0.8].
`learnable_share` is per step over the environments played; `learnable_share_budget` counts every environment
slot (a slot left empty is 0); `learnable_share_window` is the paper's (Figure 6): over the steps of the current
`run.learnable_window`-step window so far, learnable environments over environment slots.
A row also lifts the learner's `staleness` (its trained tokens' mean version lag) and the same by role,
`staleness_agent` and `staleness_designer`, to the top level.
`plays_ended_by_clock`: of `plays_failed`, the plays a sandbox clock ended (the environment's own time past
`sandbox.episode_timeout_s`, or the whole play past `sandbox.play_timeout_s`); each keeps its reason in `failure`.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import msgspec

from engine.protocol.messages import PlayResult, TaskFailed
from engine.protocol.metrics_file import append_row, read_rows
from engine.rewards import learnable, mean, returns_by_group, win_rate


class StepOutcome(msgspec.Struct, kw_only=True):
    step: int
    plays: list[PlayResult]
    results: list  # every play task's result, failed tasks included
    agent_samples: int
    designer_samples: int
    zero_variance_groups: int
    dropped_stale: int
    envs_requested: int  # design attempts at this step's refresh (0 between refreshes)
    envs_valid: int
    tokens: int
    seconds: float
    agent_groups: int = 0  # (environment, arm) groups of trained agent samples
    edits_requested: int = 0  # of envs_requested, edit tasks (a variant of a remembered environment)
    edits_valid: int = 0  # of envs_valid, edits
    duplicates: int = 0  # edits rejected as copies of an environment in memory
    edit_replies: int = 0  # replies the edit tasks generated (>= edits_requested: play.edit_draws)

    @classmethod
    def of(cls, step: int, played, batch, refresh, seconds: float) -> "StepOutcome":
        """From the stages' results: the step's plays (engine/plays.py StepPlays), its batch (engine/batches.py
        StepBatch) and its refresh (engine/refresh.py RefreshResult; counts 0 between refreshes)."""
        plays = played.plays
        return cls(
            step=step, plays=plays, results=played.results, agent_samples=len(batch.agent), designer_samples=len(batch.designer),
            zero_variance_groups=batch.zero_variance_groups, dropped_stale=batch.dropped_stale, envs_requested=refresh.requested,
            envs_valid=refresh.valid, tokens=refresh.tokens + sum(r.tokens_generated for r in plays), seconds=seconds,
            agent_groups=batch.agent_groups, edits_requested=refresh.edits_requested, edits_valid=refresh.edits_valid,
            duplicates=refresh.duplicates, edit_replies=refresh.edit_replies,
        )


# How the sandbox words a play that one of its clocks ended (actors/sandbox/episode.py episode_clock_failure and
# play_clock_failure; tests/actors/sandbox/test_episode_clocks.py checks the two agree).
CLOCK_FAILURES = ("timeout: the episode took longer", "timeout: the play took longer")


def ended_by_clock(play) -> bool:
    """Whether a play (a `PlayResult` or an agent `TrajectoryRecord`) was ended by a sandbox clock."""
    return play.status == "failed" and play.failure.startswith(CLOCK_FAILURES)


def step_metrics(o: StepOutcome, *, k: int, env_slots: int, isolation: str) -> dict:
    groups = returns_by_group(o.plays)
    by_arm: dict[str, list[float]] = defaultdict(list)
    for (_, arm), returns in groups.items():
        by_arm[arm] += returns
    env_win = [win_rate(returns) for (_, arm), returns in groups.items() if arm == "no_hint"]
    parse_rules: dict[str, int] = defaultdict(int)
    for r in o.plays:
        for t in r.turns:
            parse_rules[t.parse_rule] += 1
    return {
        "step": o.step,
        "refresh": o.step % k == 0,
        "env_slots": env_slots,
        "envs_requested": o.envs_requested,
        "envs_valid": o.envs_valid,
        # valid designs per design attempt, fresh and edited apart (edits: curriculum.edit_share); None: no attempt
        "design_valid_rate_fresh": _rate(o.envs_valid - o.edits_valid, o.envs_requested - o.edits_requested),
        "design_valid_rate_edit": _rate(o.edits_valid, o.edits_requested),
        "edits_requested": o.edits_requested,
        "edits_valid": o.edits_valid,
        "edit_duplicates": o.duplicates,
        "edit_replies": o.edit_replies,
        "active_envs": len(env_win),
        "plays": len(o.plays),
        "plays_failed": sum(1 for r in o.plays if r.status == "failed") + sum(1 for r in o.results if isinstance(r, TaskFailed)),
        "plays_ended_by_clock": sum(1 for r in o.plays if ended_by_clock(r)),
        "win_rate_no_hint": win_rate(by_arm["no_hint"]),
        "win_rate_hint": win_rate(by_arm["hint"]),
        "mean_return_no_hint": mean(by_arm["no_hint"]),
        "mean_return_hint": mean(by_arm["hint"]),
        "mean_regret": mean(by_arm["hint"]) - mean(by_arm["no_hint"]) if by_arm["hint"] else 0.0,
        "hint_plays": len(by_arm["hint"]),
        "learnable_share": mean([1.0 if learnable(w) else 0.0 for w in env_win]),
        "learnable_envs": sum(1 for w in env_win if learnable(w)),
        "learnable_share_budget": sum(1 for w in env_win if learnable(w)) / env_slots if env_slots else 0.0,
        "agent_samples": o.agent_samples,
        "designer_samples": o.designer_samples,
        "zero_variance_groups": o.zero_variance_groups,
        "agent_groups": o.agent_groups,
        # the share of trained groups whose returns differ (only those give an agent gradient)
        "nonzero_variance_share": _rate(o.agent_groups - o.zero_variance_groups, o.agent_groups),
        "dropped_stale": o.dropped_stale,
        "tokens_generated": o.tokens,
        "tokens_per_s": o.tokens / o.seconds if o.seconds > 0 else 0.0,
        "step_seconds": o.seconds,
        "parse_rules": dict(parse_rules),
        "sandbox": isolation,
    }


def _rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def window_share(rows: dict[int, dict], first: int, step: int) -> float:
    """Learnable environments over environment slots across the steps first..step (rows by step; a step without
    a row, e.g. one whose row a crash lost, is left out)."""
    slots = learnable = 0
    for s in range(first, step + 1):
        row = rows.get(s)
        if row is not None:
            slots += row.get("env_slots", 0)
            learnable += row.get("learnable_envs", 0)
    return learnable / slots if slots else 0.0


class MetricsLog:
    """`metrics.jsonl`: one row per policy version, the step's metrics with the learner's. A version written
    again (a batch resent to a learner whose checkpoint was behind) replaces its row in place instead of adding one;
    resent without the step's figures (after a restart) it keeps the stored ones and updates the learner's."""

    def __init__(self, path: Path):
        self.path = path
        self._versions = {row.get("policy_version") for row in self._rows()}

    def _rows(self) -> list[dict]:
        return read_rows(self.path)

    def has(self, policy_version: int) -> bool:
        """Whether the row of `policy_version` is written."""
        return policy_version in self._versions

    def step_rows(self) -> dict[int, dict]:
        """The rows written so far, by step (the newest row of a step)."""
        return {row["step"]: row for row in self._rows() if "step" in row}

    def write(self, step: int, stats: dict | None, learner: dict, policy_version: int) -> dict:
        row = {
            "step": step,
            **(stats or {}),
            "policy_version": policy_version,
            "learner_loss": learner.get("loss", 0.0),
            "staleness": learner.get("staleness", 0.0),
            # by role: a designer sample trains k versions after it was made, which the token mean above mixes in
            "staleness_agent": learner.get("staleness_agent", 0.0),
            "staleness_designer": learner.get("staleness_designer", 0.0),
            "learner": learner,
            "time": time.time(),
        }
        if policy_version in self._versions:
            # In place, the other rows (evaluation rows too) where they were. A batch resent after a restart comes
            # without the step's figures (the engine that played it is gone): the stored row keeps them, and only
            # the learner's fields are new.
            rows, placed = [], False
            for old in self._rows():
                if old.get("policy_version") != policy_version:
                    rows.append(old)
                elif not placed:
                    row = row if stats is not None else {**old, **{k: v for k, v in row.items() if k != "step"}}
                    rows.append(row)
                    placed = True
            if not placed:
                rows.append(row)
            tmp = self.path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
            tmp.replace(self.path)
        else:
            append_row(self.path, row)
            self._versions.add(policy_version)
        return row
