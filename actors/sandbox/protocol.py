"""What crosses the boundary between the pool and a sandbox worker: its start-up config, then the frames.

The config (`WorkerConfig`) is the worker's one command-line argument, JSON. Frames are a 4-byte big-endian
length, then one JSON object. The worker (`worker.py`) speaks plain `json` because it runs on the system
interpreter without msgspec (it reads the config into its own `WorkerConfig` of the same fields); this side
encodes and decodes with msgspec, tagged by `op` (requests) and `type` (replies). A reply that does not decode
is treated as the worker having been subverted.
"""

from typing import Any

import msgspec


# pool -> worker, at start-up
class WorkerConfig(msgspec.Struct, frozen=True, kw_only=True):
    memory_mb: int  # RLIMIT_AS
    cpu_seconds: int  # CPU time of each episode (RLIMIT_CPU, restarted at every load)
    file_size_mb: int  # RLIMIT_FSIZE
    open_files: int  # RLIMIT_NOFILE
    max_output_bytes: int  # a longer reply becomes a `limit` failure
    allowed_modules: list[str]  # what an environment may import (imported before the snapshot)
    seccomp: bool  # install the seccomp deny-list
    die_with_parent: bool  # PR_SET_PDEATHSIG
    parent_pid: int | None  # no wrapper in between: the pool's pid, to catch a pool that died before the line above
    guard_writes: bool  # the host's files are the worker's own: keep them as they are, or do not start
    landlock: bool  # with guard_writes: install Landlock (writes only to the scratch directory)


def encode_worker_config(config: WorkerConfig) -> str:
    return msgspec.json.encode(config).decode()


# pool -> worker
class Load(msgspec.Struct, frozen=True, tag_field="op", tag="load"):
    source: str


class Reset(msgspec.Struct, frozen=True, tag_field="op", tag="reset"):
    seed: int | None


class Step(msgspec.Struct, frozen=True, tag_field="op", tag="step"):
    action: str


class Solution(msgspec.Struct, frozen=True, tag_field="op", tag="solution"):
    pass


class End(msgspec.Struct, frozen=True, tag_field="op", tag="end"):
    pass


class CallTool(msgspec.Struct, frozen=True, tag_field="op", tag="call_tool"):
    """A tool call of the tool-use setting (actors/sandbox/tool_env.py); the result is cut at max_chars."""

    name: str
    arguments: dict[str, Any]
    max_chars: int = 4000


class InspectTools(msgspec.Struct, frozen=True, tag_field="op", tag="inspect_tools"):
    pass


Request = Load | Reset | Step | Solution | End | CallTool | InspectTools


# worker -> pool
class Ready(msgspec.Struct, frozen=True, tag_field="type", tag="ready"):
    pid: int
    python: str
    seccomp: bool
    seccomp_detail: str


class Loaded(msgspec.Struct, frozen=True, tag_field="type", tag="loaded"):
    class_name: str
    has_solution: bool


class ResetDone(msgspec.Struct, frozen=True, tag_field="type", tag="reset"):
    observation: str
    info: dict[str, Any]


class StepDone(msgspec.Struct, frozen=True, tag_field="type", tag="step"):
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class SolutionDone(msgspec.Struct, frozen=True, tag_field="type", tag="solution"):
    actions: list[str] | None


class Ended(msgspec.Struct, frozen=True, tag_field="type", tag="ended"):
    retire: bool
    reason: str


class Failed(msgspec.Struct, frozen=True, tag_field="type", tag="failed"):
    kind: str
    detail: str


class ToolDone(msgspec.Struct, frozen=True, tag_field="type", tag="tool"):
    result: str


class Inspected(msgspec.Struct, frozen=True, tag_field="type", tag="inspected"):
    """A tool-use environment as reset left it: its tool specs, instructions and each criterion's value."""

    tools: dict[str, Any] | None
    messages: list[str] | None
    criteria: list[str]  # "true", "false" or "error: ..." per instruction
    current: int
    has_state: bool
    expected_answer: str


Reply = Ready | Loaded | ResetDone | StepDone | SolutionDone | Ended | Failed | ToolDone | Inspected

_encoder = msgspec.json.Encoder()
reply_decoder = msgspec.json.Decoder(Reply)


def encode_frame(request: Request) -> bytes:
    body = _encoder.encode(request)
    return len(body).to_bytes(4, "big") + body
