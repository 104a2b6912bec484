"""Record types stored in LMDB, and the byte packing of token arrays.

Every record carries a schema version `v`; a record that does not decode raises `StoredRecordError` naming the
database and key, so a corrupt or foreign store is reported, not crashed on.
"""

from __future__ import annotations

from typing import Literal

import msgspec
import numpy as np

from engine.messages import Arm, Role, Sample, TurnRecord

SCHEMA_VERSION = 1


class StoredRecordError(Exception):
    """A record in the store could not be decoded."""


class EnvironmentRecord(msgspec.Struct, kw_only=True):
    v: int = SCHEMA_VERSION
    env_id: str
    skill: str
    step_created: int
    source: Literal["designed", "seed"]
    passage_id: str
    attempt: int
    code: str
    reply: str
    hint: str
    valid: bool
    reason: str
    checks: list[tuple[str, bool, str]]
    designer_sample_id: str
    worker_id: str
    created_at: float


class TrajectoryRecord(msgspec.Struct, kw_only=True):
    v: int = SCHEMA_VERSION
    sample_id: str
    role: Role
    env_id: str
    skill: str
    arm: Arm
    step: int
    seed: int
    status: str  # completed | truncated | failed | designed | rejected
    failure: str
    episode_return: float
    turns: list[TurnRecord]
    sample: Sample
    created_at: float


class MemoryRecord(msgspec.Struct, kw_only=True):
    v: int = SCHEMA_VERSION
    env_id: str
    skill: str
    name: str  # the environment's class name
    code: str
    win_rate: float
    regret: float
    step: int
    source: Literal["designed", "seed"]


class DesignerRewardRecord(msgspec.Struct, kw_only=True):
    v: int = SCHEMA_VERSION
    env_id: str
    skill: str
    designer_sample_id: str
    env_step: int  # the refresh step that created the environment
    reward_step: int  # the step whose update trains on it (env_step + k)
    variant: str
    regret: float
    win_rate: float
    raw_reward: float
    advantage: float
    hint_return: float
    no_hint_return: float


class BatchEntry(msgspec.Struct, array_like=True):
    trajectory_key: str  # key in `trajectories` (step/sample_id)
    advantage: float
    reward: float


class BatchRecord(msgspec.Struct, kw_only=True):
    """What one learner update trained on, so a restarted learner can be sent exactly the same batch again."""

    v: int = SCHEMA_VERSION
    index: int  # the n-th batch of the run; the learner's policy version after it is index + 1
    step: int
    checkpoint: bool
    entries: list[BatchEntry]


class RunState(msgspec.Struct, kw_only=True):
    v: int = SCHEMA_VERSION
    steps_done: int = 0  # steps whose plays and training batch are committed
    batches: int = 0  # training batches recorded (in `batches`)
    policy_version: int = 0
    active_env_ids: list[str] = msgspec.field(default_factory=list)
    refresh_step: int = -1  # the step of the latest refresh
    isolation: str = ""
    finished: bool = False


def pack_ints(values) -> bytes:
    return np.asarray(values, dtype="<i4").tobytes()


def pack_mask(values) -> bytes:
    return np.asarray(values, dtype=np.uint8).tobytes()


def pack_floats(values) -> bytes:
    return np.asarray(values, dtype="<f4").tobytes()


def unpack_ints(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i4")


def unpack_mask(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8)


def unpack_floats(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<f4")


def check_sample(sample: Sample) -> None:
    """A sample's arrays must line up: raises ValueError naming the mismatch."""
    for name in ("tokens", "logprobs", "versions"):  # 4-byte entries
        if len(getattr(sample, name)) % 4:
            raise ValueError(f"sample {sample.sample_id}: {name} holds {len(getattr(sample, name))} bytes, not a whole number of 4-byte entries")
    n = len(sample.tokens) // 4
    lengths = {
        "loss_mask": len(sample.loss_mask),
        "logprobs": len(sample.logprobs) // 4,
        "versions": len(sample.versions) // 4,
    }
    for name, length in lengths.items():
        if length != n:
            raise ValueError(f"sample {sample.sample_id}: {name} has {length} entries for {n} tokens")
