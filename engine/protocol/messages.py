"""Every message that crosses a process boundary, as tagged msgspec Structs, one union per direction.

Sockets (engine binds both, see engine/protocol/transport.py):
- `workers`: engine ROUTER <-> rollout worker DEALER. Worker -> engine: `WorkerToEngine`; engine -> worker:
  `EngineToWorker`.
- `learner`: engine ROUTER <-> learner DEALER. Learner -> engine: `LearnerToEngine`; engine -> learner:
  `EngineToLearner`.

Token data travels as raw little-endian bytes (int32 ids, uint8 mask, float32 log-probs, int32 versions); use
the `pack_*` / `unpack_*` helpers at the end of this module to convert, `check_sample` to check that a
sample's arrays line up and `sample_problem` that its values are sane. A peer that sends bytes that do not decode into the
socket's union gets a `ProtocolError` naming the problem (engine/protocol/transport.py), never a crash of the engine.
"""

from __future__ import annotations

import math
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


# A behaviour log-prob above 0 by more than float32 rounding is not a log-probability.
LOGPROB_TOLERANCE = 1e-4


def sample_problem(sample: Sample, *, vocab_size: int | None = None, max_version: int | None = None) -> str | None:
    """What is wrong with a sample's values, or None: its arrays line up (`check_sample`); token ids lie in
    [0, vocab_size); the loss mask is 0 or 1; log-probs are finite, and <= 0 (within LOGPROB_TOLERANCE) on masked
    tokens; versions lie in [-1, max_version]; reward, advantage and temperature are finite. The engine asks it of
    every result a worker sends (engine/peers/result_checks.py), the learner of every batch (learner/guards.py)."""
    try:
        check_sample(sample)
    except ValueError as exc:
        return str(exc)[:200]
    for name in ("reward", "advantage", "temperature"):
        if not math.isfinite(getattr(sample, name)):
            return f"sample {name} is {getattr(sample, name)}, not a finite number"
    ids, mask = unpack_ints(sample.tokens), unpack_mask(sample.loss_mask)
    if not len(ids):
        return None
    # Every result a worker sends passes here: whole-array reductions, no index arrays.
    # Read as unsigned, a negative id is >= 2**31, so one max bounds both ends.
    outside = int(ids.min()) < 0 if vocab_size is None else int(ids.view("<u4").max()) >= min(vocab_size, 1 << 31)
    if outside:
        low, high = int(ids.min()), int(ids.max())
        return f"token id {low if low < 0 else high} is outside the model's vocabulary [0, {vocab_size})"
    if int(mask.max()) > 1:
        return f"loss mask holds {int(mask.max())}, not only 0 and 1"
    logprobs = unpack_floats(sample.logprobs)
    if not np.isfinite(logprobs).all():
        return "a behaviour log-prob is not finite"
    # The largest log-prob on a sampled token (mask 1); masked out, a value reads 0, which never exceeds the tolerance.
    if (top := float((logprobs * mask).max())) > LOGPROB_TOLERANCE:
        return f"a behaviour log-prob on a sampled token is {top:.4g} > 0"
    versions = unpack_ints(sample.versions)
    if int(versions.min()) < -1 or (max_version is not None and int(versions.max()) > max_version):
        return f"policy versions span [{int(versions.min())}, {int(versions.max())}], outside [-1, {max_version}]"
    return None


_U4, _I4, _F4, _U1 = np.dtype("<u4"), np.dtype("<i4"), np.dtype("<f4"), np.dtype(np.uint8)


def values_pass(samples: list[Sample], *, vocab_size: int | None = None, max_version: int | None = None, versioned: bool = False) -> bool:
    """Whether every sample passes `sample_problem` (and, `versioned`, stamps each loss-mask token with a policy
    version >= 0): one pass over all their arrays joined, as every check holds token by token. The engine asks it
    of the results a receive brings in together, so the checks cost a few array passes a batch rather than a
    sample. False says only that something fails somewhere: `sample_problem` of each says what."""
    for s in samples:
        n = len(s.tokens)
        if n % 4 or len(s.logprobs) != n or len(s.versions) != n or len(s.loss_mask) * 4 != n:
            return False
        if not (math.isfinite(s.reward) and math.isfinite(s.advantage) and math.isfinite(s.temperature)):
            return False
    joined = (lambda name: getattr(samples[0], name)) if len(samples) == 1 else (lambda name: b"".join(getattr(s, name) for s in samples))
    tokens = joined("tokens")
    if not tokens:
        return True
    # Read as unsigned, a negative id (or version + 1) is >= 2**31, so one max bounds both ends.
    if int(np.maximum.reduce(np.frombuffer(tokens, _U4))) >= (1 << 31 if vocab_size is None else min(vocab_size, 1 << 31)):
        return False
    mask = np.frombuffer(joined("loss_mask"), _U1)
    if int(np.maximum.reduce(mask)) > 1:
        return False
    logprobs = np.frombuffer(joined("logprobs"), _F4)
    if not np.logical_and.reduce(np.isfinite(logprobs)) or float(np.maximum.reduce(logprobs * mask)) > LOGPROB_TOLERANCE:
        return False  # masked out, a log-prob reads 0
    versions = np.frombuffer(joined("versions"), _I4)
    if int(np.maximum.reduce((versions + 1).view(_U4))) > (max_version + 1 if max_version is not None else (1 << 31) - 1):
        return False
    return not versioned or int(np.minimum.reduce(versions * mask)) >= 0  # masked out, a version reads 0


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
