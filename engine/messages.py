"""Every message that crosses a process boundary, as tagged msgspec Structs, one union per direction.

Sockets (engine binds both, see engine/transport.py):
- `workers`: engine ROUTER <-> rollout worker DEALER. Worker -> engine: `WorkerToEngine`; engine -> worker:
  `EngineToWorker`.
- `learner`: engine ROUTER <-> learner DEALER. Learner -> engine: `LearnerToEngine`; engine -> learner:
  `EngineToLearner`.

Token data travels as raw little-endian bytes (int32 ids, uint8 mask, float32 log-probs, int32 versions); use
the `pack_*` / `unpack_*` helpers at the end of this module to convert, and `check_sample` to check that a
sample's arrays line up. A peer that sends bytes that do not decode into the
socket's union gets a `ProtocolError` naming the problem (engine/transport.py), never a crash of the engine.
"""

from __future__ import annotations

from typing import Literal

import msgspec
import numpy as np

Role = Literal["designer", "agent"]
# The tool-use setting (the designer writes tool specs and user instructions, the agent calls tools, tool
# results come back as `tool`-role messages) travels on the same messages; only "games" is implemented yet.
Setting = Literal["games", "tool_use"]
Arm = Literal["no_hint", "hint", "design"]


class _Msg(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    pass


class Sample(msgspec.Struct, frozen=True, kw_only=True):
    """One training sequence: prompt + completion tokens, with per-token loss mask, behaviour log-probs, versions."""

    sample_id: str
    role: Role
    env_id: str
    skill: str
    arm: Arm
    step: int  # the step whose plays (or refresh) produced it
    tokens: bytes  # int32
    loss_mask: bytes  # uint8: 1 on sampled (assistant) tokens
    logprobs: bytes  # float32 behaviour log-probs (temperature-scaled), 0 where mask is 0
    versions: bytes  # int32 policy version that sampled each token, -1 where mask is 0
    reward: float
    advantage: float = 0.0
    temperature: float = 1.0


class MemoryExample(msgspec.Struct, frozen=True, kw_only=True):
    skill: str
    win_rate: float
    regret: float
    code: str
    name: str


class TurnRecord(msgspec.Struct, frozen=True, kw_only=True):
    action: str  # what was sent to env.step
    parse_rule: str  # which rule reduced the reply to the action (boxed_first, boxed_last, answer_tag, ...)
    reward: float
    terminated: bool
    truncated: bool
    policy_version: int
    observation_chars: int


# ---------------------------------------------------------------- worker -> engine
class WorkerHello(_Msg, tag="worker_hello"):
    worker_id: str
    pid: int
    slots: int
    isolation: str
    backend: str
    policy_version: int


class Heartbeat(_Msg, tag="heartbeat"):
    worker_id: str
    policy_version: int
    busy: int


class DesignResult(_Msg, tag="design_result"):
    task_id: str
    worker_id: str
    skill: str
    passage_id: str
    attempt: int
    reply: str  # the designer's whole reply
    code: str  # extracted (and brace-repaired) source, "" if nothing could be extracted
    valid: bool
    reason: str  # "" when valid; else the first failed check
    checks: list[tuple[str, bool, str]]  # (name, passed, detail) for every check run
    hint: str
    designer: Sample  # role=designer; reward filled in by the engine k steps later
    tokens_generated: int
    seconds: float


class PlayResult(_Msg, tag="play_result"):
    task_id: str
    worker_id: str
    env_id: str
    arm: Arm
    seed: int
    status: Literal["completed", "truncated", "failed"]
    failure: str  # "" unless failed (sandbox failure kind and detail)
    episode_return: float
    turns: list[TurnRecord]
    agent: Sample
    tokens_generated: int
    seconds: float


class TaskFailed(_Msg, tag="task_failed"):
    task_id: str
    worker_id: str
    reason: str


class WorkerBye(_Msg, tag="worker_bye"):
    worker_id: str


WorkerToEngine = WorkerHello | Heartbeat | DesignResult | PlayResult | TaskFailed | WorkerBye


# ---------------------------------------------------------------- engine -> worker
class DesignTask(_Msg, tag="design_task"):
    task_id: str
    skill: str
    skill_description: str
    passage_id: str
    passage: str
    examples: list[MemoryExample]
    negatives: list[str]  # one line each: "too easy (win_rate=0.95): class FooEnv"
    attempt: int
    step: int
    setting: Setting = "games"


class PlayTask(_Msg, tag="play_task"):
    task_id: str
    env_id: str
    skill: str
    code: str
    hint: str  # "" for the no-hint arm
    arm: Arm
    seed: int
    step: int
    setting: Setting = "games"


class PolicyUpdate(_Msg, tag="policy_update"):
    version: int
    path: str


class Shutdown(_Msg, tag="shutdown"):
    reason: str = ""


class HelloAgain(_Msg, tag="hello_again"):
    """To a worker the engine does not know (the engine restarted, or it dropped the worker as silent): send
    WorkerHello again to (re)join."""


EngineToWorker = DesignTask | PlayTask | PolicyUpdate | HelloAgain | Shutdown


# ---------------------------------------------------------------- learner -> engine
class LearnerHello(_Msg, tag="learner_hello"):
    pid: int
    policy_version: int
    policy_path: str


class PolicyPublished(_Msg, tag="policy_published"):
    version: int
    path: str
    step: int
    metrics: dict[str, float]


class LearnerFailed(_Msg, tag="learner_failed"):
    reason: str


LearnerToEngine = LearnerHello | PolicyPublished | LearnerFailed


# ---------------------------------------------------------------- engine -> learner
class TrainBatch(_Msg, tag="train_batch"):
    step: int
    samples: list[Sample]
    checkpoint: bool  # save a full checkpoint after this update


EngineToLearner = TrainBatch | Shutdown


# ---------------------------------------------------------------- token arrays on the wire
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
