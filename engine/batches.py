"""Training batches: what a step trains on, how it is recorded, and how a stored batch is read back.

Batch i of a run is trained by policy version i and makes version i + 1 (`BatchRecord.version` is that i). A
step's agent samples (its unhinted plays; the hinted ones too with `play.train_hint_plays`) carry their advantage
(z-score within each (environment, arm) group); samples staler than
`run.max_staleness` versions when their batch trains are dropped and counted (`drop_stale`); the designer
samples whose reward fell due at the step join them (engine/designer_queue.py).
"""

from __future__ import annotations

import msgspec

from engine.protocol.errors import InputError
from engine.protocol.messages import PlayResult, Sample, unpack_ints
from engine.rewards import group_advantages, returns_by_group
from storage.records import BatchEntry, BatchRecord
from storage.store import Store, trajectory_key


class MissingTrajectory(InputError):
    """A stored batch names a trajectory that is not in the store (a damaged store)."""


def agent_samples(plays: list[PlayResult], *, train_hint: bool = True) -> tuple[list[Sample], int]:
    """The agent samples of a step's plays with their advantages, and how many groups had zero variance; without
    `train_hint` (`play.train_hint_plays`, off as in the reference) the hinted plays give no sample."""
    groups = {key: returns for key, returns in returns_by_group(plays).items() if train_hint or key[1] != "hint"}
    members: dict[tuple[str, str], list[PlayResult]] = {key: [] for key in groups}
    for play in plays:
        if play.status != "failed" and (play.env_id, play.arm) in members:
            members[(play.env_id, play.arm)].append(play)
    samples, zero_groups = [], 0
    for key, returns in groups.items():
        advantages = group_advantages(returns)
        if all(a == 0.0 for a in advantages):
            zero_groups += 1
        samples += [msgspec.structs.replace(p.agent, advantage=a) for p, a in zip(members[key], advantages)]
    return samples, zero_groups


def drop_stale(samples: list[Sample], trained_at: int, bound: int) -> tuple[list[Sample], int]:
    """Agent samples with a token sampled more than `bound` versions before `trained_at` (the policy version that
    trains their batch) are dropped and counted, never trained on. Designer samples are late by design (k steps)
    and exempt; the objective's correction handles them."""
    kept = []
    for sample in samples:
        versions = unpack_ints(sample.versions)
        sampled = versions[versions >= 0]
        if sample.role == "agent" and sampled.size and trained_at - int(sampled.min()) > bound:
            continue
        kept.append(sample)
    return kept, len(samples) - len(kept)


def batch_record(version: int, step: int, samples: list[Sample], checkpoint: bool) -> BatchRecord:
    entries = [BatchEntry(trajectory_key(s.step, s.sample_id), s.advantage, s.reward) for s in samples]
    return BatchRecord(version=version, step=step, checkpoint=checkpoint, entries=entries)


def stored_batch_samples(store: Store, record: BatchRecord) -> list[Sample]:
    """The samples of a recorded batch, read back from the trajectories with the advantages it trained with."""
    samples = []
    for entry in record.entries:
        trajectory = store.trajectory(entry.trajectory_key)
        if trajectory is None:
            raise MissingTrajectory(f"batch {record.version} names trajectory {entry.trajectory_key}, which is not in the store")
        samples.append(msgspec.structs.replace(trajectory.sample, advantage=entry.advantage, reward=entry.reward))
    return samples
