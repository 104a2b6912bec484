"""Training batches: what a step trains on, how it is recorded, and how a stored batch is read back.

Batch i of a run is trained by policy version i and makes version i + 1 (`BatchRecord.version` is that i). A
step's agent samples (its unhinted plays; the hinted ones too with `play.train_hint_plays`) carry their advantage
(z-score within each (environment, arm) group); samples staler than
`run.max_staleness` versions when their batch trains, or with a trained token that carries no version, are dropped
and counted (`drop_stale`); the designer
samples whose reward fell due at the step join them (engine/designer_reward.py).

    batch = step_batch(plays, due, train_hint=..., trained_at=..., bound=...)   # one step's StepBatch
    record = batch_record(version, step, batch.samples, checkpoint)            # what LMDB keeps of it
"""

from __future__ import annotations

import json

import msgspec

from engine.protocol.errors import InputError
from engine.protocol.messages import PlayResult, Sample, unpack_ints, unpack_mask
from engine.rewards import group_advantages, returns_by_group
from storage.records import BatchEntry, BatchRecord
from storage.store import Store, trajectory_key, trajectory_prefix


class MissingTrajectory(InputError):
    """A stored batch names a trajectory that is not in the store (a damaged store)."""


def advantage_groups(plays: list, *, train_hint: bool = True) -> list[tuple[tuple[str, str], list, list[float]]]:
    """Each trained (environment, arm) group of a step's plays (`PlayResult`s or agent `TrajectoryRecord`s): its
    plays that did not fail and their advantages, in order. Without `train_hint` (`play.train_hint_plays`, off as in
    the reference) the hinted groups are left out. Shared with the rescore (engine/tools/rescore.py)."""
    out = []
    for key, returns in returns_by_group(plays).items():
        if train_hint or key[1] != "hint":
            members = [p for p in plays if p.status != "failed" and (p.env_id, p.arm) == key]
            out.append((key, members, group_advantages(returns)))
    return out


def agent_samples(plays: list[PlayResult], *, train_hint: bool = True) -> tuple[list[Sample], int]:
    """The agent samples of a step's plays with their advantages, and how many groups had zero variance."""
    samples, zero_groups = [], 0
    for _, members, advantages in advantage_groups(plays, train_hint=train_hint):
        if all(a == 0.0 for a in advantages):
            zero_groups += 1
        samples += [msgspec.structs.replace(p.agent, advantage=a) for p, a in zip(members, advantages)]
    return samples, zero_groups


def drop_stale(samples: list[Sample], trained_at: int, bound: int) -> tuple[list[Sample], int]:
    """Samples that must not train, dropped and counted: an agent sample with a loss-mask token sampled more than
    `bound` versions before `trained_at` (the policy version that trains its batch), and a sample of either role
    with a loss-mask token that carries no real version (< 0: the worker's result check refuses those,
    engine/peers/result_checks.py; this is the second line, since such a token's age is unknown). Designer samples
    are otherwise exempt: they are late by design (k steps), and the objective's correction handles them. A sample
    with no loss-mask token has nothing to be stale by."""
    kept = []
    for sample in samples:
        sampled = unpack_ints(sample.versions)[unpack_mask(sample.loss_mask) == 1]
        if sampled.size and int(sampled.min()) < 0:
            continue
        if sample.role == "agent" and sampled.size and trained_at - int(sampled.min()) > bound:
            continue
        kept.append(sample)
    return kept, len(samples) - len(kept)


class StepBatch(msgspec.Struct, kw_only=True):
    """What a step trains: its agent samples (after the stale drop) and the designer samples due at it."""

    agent: list[Sample]
    designer: list[Sample]
    zero_variance_groups: int
    agent_groups: int  # the (environment, arm) groups with a sample, before the stale drop
    dropped_stale: int

    @property
    def samples(self) -> list[Sample]:
        return self.agent + self.designer


def step_batch(plays: list[PlayResult], due: list[Sample], *, train_hint: bool, trained_at: int, bound: int) -> StepBatch:
    """The batches stage of a step: agent samples with advantages, the stale ones dropped, the designer samples due."""
    samples, zero_groups = agent_samples(plays, train_hint=train_hint)
    groups = len({(s.env_id, s.arm) for s in samples})
    samples, too_stale = drop_stale(samples, trained_at, bound)
    return StepBatch(agent=samples, designer=due, zero_variance_groups=zero_groups, agent_groups=groups, dropped_stale=too_stale)


def batch_record(version: int, step: int, samples: list[Sample], checkpoint: bool, sample_norm: int = 0,
                 step_row: dict | None = None) -> BatchRecord:
    entries = [BatchEntry(trajectory_key(s.step, s.sample_id), s.advantage, s.reward) for s in samples]
    return BatchRecord(version=version, step=step, checkpoint=checkpoint, entries=entries, sample_norm=sample_norm,
                       step_row=json.dumps(step_row) if step_row else "")


def stored_step_row(record: BatchRecord) -> dict | None:
    """The metrics row stored with a batch (None for none, or one that does not decode to an object)."""
    try:
        row = json.loads(record.step_row) if record.step_row else None
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


def stored_batch_samples(store: Store, record: BatchRecord) -> list[Sample]:
    """The samples of a recorded batch, read back from the trajectories with the advantages it trained with."""
    samples = []
    for entry in record.entries:
        trajectory = store.trajectory(entry.trajectory_key)
        if trajectory is None:
            raise MissingTrajectory(f"batch {record.version} names trajectory {entry.trajectory_key}, which is not in the store")
        samples.append(msgspec.structs.replace(trajectory.sample, advantage=entry.advantage, reward=entry.reward))
    return samples


def stored_agent_samples(store: Store, step: int) -> int:
    """The agent samples step's stored batch trained (the designer ones in it were made at an earlier step); 0 if none."""
    record = next((r for r in store.batches() if r.step == step), None)
    return sum(1 for e in record.entries if e.trajectory_key.startswith(trajectory_prefix(step))) if record else 0
