"""Record types stored in LMDB (token arrays inside them are packed as engine/protocol/messages.py says).

Every record carries a schema version `v`; a record that does not decode raises `StoredRecordError` naming the
database and key, so a corrupt or foreign store is reported, not crashed on.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from engine.protocol.errors import InputError
from engine.protocol.messages import Arm, Role, Sample, TurnRecord

SCHEMA_VERSION = 1


class StoredRecordError(InputError):
    """A record in the store could not be decoded (a damaged or foreign store: the user restores or starts anew)."""


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
    setting: str = "games"  # games | tool_use (engine.protocol.messages.Setting); older stores decode as games
    parent_id: str = ""  # an edited design: the env_id of the environment it is a variant of; "": a fresh design


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
    setting: str = "games"  # the memory is kept per setting: the designer sees examples of its own setting only


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
    # The policy version that trains this batch (the run's n-th batch is trained by version n, making n + 1);
    # stored under its first name, `index`.
    version: int = msgspec.field(name="index")
    step: int
    checkpoint: bool
    entries: list[BatchEntry]
    sample_norm: int = 0  # the final flush's per-sample-mean count (TrainBatch.sample_norm), so a resent flush weighs the same
    step_row: str = ""  # the step's metrics row (JSON) as it stood at the send: a batch resent after a restart writes it whole


class RunState(msgspec.Struct, kw_only=True):
    v: int = SCHEMA_VERSION
    steps_done: int = 0  # steps whose plays and training batch are committed
    batches: int = 0  # training batches recorded (in `batches`): the policy version the learner reaches after them
    policy_version: int = 0
    active_env_ids: list[str] = msgspec.field(default_factory=list)
    refresh_step: int = -1  # the step of the latest refresh
    isolation: str = ""
    finished: bool = False
    rlve: dict[str, list[int]] = msgspec.field(default_factory=dict)  # the RLVE controller: task -> [low, high, attempts, wins]
    rlve_counted: int = 0  # the first step whose plays the RLVE controller has not counted yet (engine/rlve.py)
