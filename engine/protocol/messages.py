"""Every message that crosses a process boundary, as tagged msgspec Structs, one union per direction.

Sockets (engine binds both, see engine/protocol/transport.py):
- `workers`: engine ROUTER <-> rollout worker DEALER. Worker -> engine: `WorkerToEngine`; engine -> worker:
  `EngineToWorker`.
- `learner`: engine ROUTER <-> learner DEALER. Learner -> engine: `LearnerToEngine`; engine -> learner:
  `EngineToLearner`.

Token data travels as raw little-endian bytes (int32 ids, uint8 mask, float32 log-probs, int32 versions); use
the `pack_*` / `unpack_*` helpers at the end of this module to convert (engine/protocol/sample_values.py checks
that a sample's arrays line up and its values are sane). A peer that sends bytes that do not decode into the socket's
union gets a `ProtocolError` naming the problem (engine/protocol/transport.py), never a crash of the engine.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
import numpy as np

Role = Literal["designer", "agent"]
# The tool-use setting (the designer writes tool specs and user instructions, the agent calls tools, tool
# results come back as `tool`-role messages) travels on the same messages (actors/tool_use; `up --setting tool-use`).
Setting = Literal["games", "tool_use"]
Arm = Literal["no_hint", "hint", "design"]
# Names a peer chooses are bounded, so a log line never echoes a huge one (a longer id does not decode).
WorkerId = Annotated[str, msgspec.Meta(max_length=128)]
Slots = Annotated[int, msgspec.Meta(ge=1, le=65536)]


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
    env_id: str = ""  # the remembered environment's id


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
    worker_id: WorkerId
    pid: int
    slots: Slots
    isolation: str
    backend: str
    policy_version: int
    secret: str = ""  # on the run's ipc socket: the run's ipc secret (engine/protocol/keys.py); tcp peers are CURVE's


class Heartbeat(_Msg, tag="heartbeat"):
    worker_id: WorkerId
    policy_version: int
    busy: int
    # Since the worker started (actors/inference/batcher.py GeneratorClock): wall seconds its generator had at least
    # one generation running, and the integral of how many ran; the engine's step account takes their differences
    # (engine/metrics/phases.py). Figures only: a peer's values are checked and never steer anything.
    generating_s: float = 0.0
    sequence_s: float = 0.0
    # Tasks (design, play, validate) taken off the socket since the worker's last hello: the engine drops a worker
    # that leaves a task unread over `worker.unread_heartbeats` beats (engine/peers/dispatch.py).
    tasks_received: Annotated[int, msgspec.Meta(ge=0)] = 0


class DesignResult(_Msg, tag="design_result"):
    task_id: str
    worker_id: WorkerId
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
    draws: int = 1  # replies generated: a number edit redraws one that copies its parent (`play.edit_draws`)
    validate_s: float = 0.0  # of `seconds`, the sandboxed validation (both passes)
    hint_s: float = 0.0  # of `seconds`, writing the hint
    policy_wait_s: float = 0.0  # before `seconds`: waiting for the task's policy version to load (or be fetched)


class PlayResult(_Msg, tag="play_result"):
    task_id: str
    worker_id: WorkerId
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
    policy_wait_s: float = 0.0  # before `seconds`: waiting for the task's policy version to load (or be fetched)


class TaskFailed(_Msg, tag="task_failed"):
    task_id: str
    worker_id: WorkerId
    reason: str


class WorkerBye(_Msg, tag="worker_bye"):
    worker_id: WorkerId


# A worker with no shared filesystem (engine/peers/policy_transfer.py serves, actors/remote.py fetches): it asks for the
# run's config first, then each policy version it needs as a manifest and its files chunk by chunk. Version 0 is
# the base model. Answered to any peer that reached the socket, before its hello too (it joins once loaded).
class FetchRunInfo(_Msg, tag="fetch_run_info"):
    worker_id: WorkerId


class FetchManifest(_Msg, tag="fetch_manifest"):
    version: int


class FetchChunk(_Msg, tag="fetch_chunk"):
    version: int
    file: str  # a name from the version's manifest
    offset: int  # the engine answers up to the manifest's chunk size from here
    # The tickets of the chunks received since the last request: the engine sends a peer only a few chunks it has
    # not shown it read, so a peer that asks and never reads cannot pile them up in the engine's memory.
    receipts: Annotated[list[int], msgspec.Meta(max_length=64)] = []


class ValidateResult(_Msg, tag="validate_result"):
    """The answer to a `ValidateTask`: the validator's verdict on the design, in the worker's sandbox."""

    task_id: str
    worker_id: WorkerId
    env_id: str
    valid: bool
    reason: str  # "" when valid; else the first failed check
    checks: list[tuple[str, bool, str]]
    sandbox: Literal["other_worker", "fresh_process"]  # not the author; or the author, in a sandbox process of its own
    seconds: float


class Slept(_Msg, tag="slept"):
    """The answer to `Sleep`: the worker's engine has freed its GPU memory (time-shared placement). Taken only from a
    known worker while the engine waits for it (engine/peers/time_share.py)."""

    worker_id: WorkerId
    seconds: Annotated[float, msgspec.Meta(ge=0.0, le=1e7)]  # how long going to sleep took (in-flight requests finished first)


WorkerToEngine = WorkerHello | Heartbeat | DesignResult | PlayResult | TaskFailed | WorkerBye | FetchRunInfo | FetchManifest | FetchChunk | ValidateResult | Slept


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
    # An edit task (`curriculum.edit_share`): the remembered valid environment to write a variant of; None: a fresh design.
    parent: MemoryExample | None = None
    parent_id: str = ""  # its env_id
    edit_mode: str = "numbers"  # numbers: new integer constants for the parent (actors/edits.py); code: the whole code
    # The policy version admission waited for (engine/run.py): the worker loads it before generating (actors/worker.py).
    min_policy_version: int = 0


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
    # The policy version admission waited for: the worker loads it before the first turn, so at `run.max_staleness = 0`
    # no play starts on the version before and is then dropped as stale (actors/worker.py).
    min_policy_version: int = 0


class PolicyUpdate(_Msg, tag="policy_update"):
    version: int
    path: str


class Shutdown(_Msg, tag="shutdown"):
    reason: str = ""


class HelloAgain(_Msg, tag="hello_again"):
    """To a worker the engine does not know (the engine restarted, or it dropped the worker as silent): send
    WorkerHello again to (re)join."""


class RunInfo(_Msg, tag="run_info"):
    config: str  # the run's resolved config.toml
    model_path: str  # the base model's folder on the engine's host (a worker that sees it loads it from there)
    policy_version: int
    policy_path: str  # on the engine's host


class PolicyFile(msgspec.Struct, frozen=True, kw_only=True):
    name: str  # relative to the version's folder
    size: int
    sha256: str  # hex


class PolicyManifest(_Msg, tag="policy_manifest"):
    version: int
    files: list[PolicyFile]  # a LoRA version holds only the adapter's files
    chunk_bytes: int  # what one FetchChunk returns (less at the end of a file)


class PolicyChunk(_Msg, tag="policy_chunk"):
    version: int
    file: str
    offset: int
    data: bytes  # shorter than the chunk size only at the end of the file
    ticket: int  # to return in a later FetchChunk's receipts


class FetchFailed(_Msg, tag="fetch_failed"):
    version: int
    reason: str  # e.g. the version was pruned (learner.keep_policies): fetch the newest one instead


class ValidateTask(_Msg, tag="validate_task"):
    """Validate a design another worker (`author`) claimed valid, before it is played (engine/revalidate.py). The
    author itself, when it gets the task (the only worker), validates in a fresh sandbox process."""

    task_id: str
    env_id: str
    skill: str
    code: str
    hint: str  # "" when the design has no hint
    author: WorkerId
    step: int


# The time-shared placement (engine/protocol/placement.py): generation and training take turns on the same GPUs.
class Sleep(_Msg, tag="sleep"):
    """Free the GPUs for the learner's update: finish the requests in flight, start no new one, put the engine to
    sleep (vLLM: weights to host RAM, KV cache dropped), answer `Slept`. Tasks that come meanwhile wait."""

    version: int  # the policy version the learner is about to make (for the logs)


class WakeUp(_Msg, tag="wake_up"):
    """The learner's update is done: wake the engine and load the newest policy (its PolicyUpdate came first)
    before generating again."""

    version: int  # the newest published version


EngineToWorker = DesignTask | PlayTask | PolicyUpdate | HelloAgain | Shutdown | RunInfo | PolicyManifest | PolicyChunk | FetchFailed | ValidateTask | Sleep | WakeUp


# ---------------------------------------------------------------- learner -> engine
class LearnerHello(_Msg, tag="learner_hello"):
    pid: int
    policy_version: int
    policy_path: str
    # The secret the engine gave its learner (engine.protocol.lifeline.LEARNER_TOKEN_ENV): only the hello that carries it is
    # taken, and later learner messages only from the identity that sent it (engine/peers/auth.py).
    token: str = ""


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
    # The sample count the per-sample mean (learner.loss_aggregation = sample_mean) divides by; 0: the batch's own.
    # The engine's final designer-only flush sends a normal step's count, so each sample weighs as it would there.
    sample_norm: int = 0


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


# ---------------------------------------------------------------- Reasoning-Gym problems inside a PlayTask
# A PlayTask whose `code` starts with REASONING_GYM_PREFIX carries, after it, a `ReasoningGymTask` as JSON: a
# Reasoning-Gym problem (a trusted library, not model-written code) that the worker plays and scores outside the
# sandbox (actors/reasoning_gym/play.py); the result is an ordinary PlayResult. Used by the RLVE baseline
# (engine/rlve.py) and by the in-loop rg-hard evaluation (engine/evaluation.py). The prefix is a Python comment.
REASONING_GYM_PREFIX = "# reasoning-gym task\n"


class ReasoningGymTask(msgspec.Struct, frozen=True, kw_only=True):
    dataset: str
    params: dict = {}  # keyword arguments of reasoning_gym.create_dataset (the rg-hard configuration)
    difficulty: int = -1  # >= 0: the dataset's curriculum with every attribute at this level (capped); params ignored
    seed: int = 42  # the dataset's seed
    size: int = 1  # the dataset's size
    index: int = 0  # the entry played
    max_turns: int = 2  # a reply without <answer></answer> tags gets one format reminder while turns are left
    max_tokens: int = 0  # new tokens per turn; 0: play.agent_max_tokens
    temperature: float = -1.0  # < 0: play.agent_temperature


def encode_reasoning_gym_task(task: ReasoningGymTask) -> str:
    return REASONING_GYM_PREFIX + msgspec.json.encode(task).decode()


def decode_reasoning_gym_task(code: str) -> ReasoningGymTask | None:
    """The Reasoning-Gym problem a PlayTask's code names, or None for environment code."""
    if not code.startswith(REASONING_GYM_PREFIX):
        return None
    return msgspec.json.decode(code[len(REASONING_GYM_PREFIX):], type=ReasoningGymTask)
