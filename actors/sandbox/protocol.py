"""Frames between the pool and a sandbox worker: a 4-byte big-endian length, then one JSON object.

The worker (`worker.py`) speaks plain `json` because it runs on the system interpreter without msgspec; this
side encodes and decodes with msgspec, tagged by `op` (requests) and `type` (replies). A reply that does not
decode is treated as the worker having been subverted.
"""

from typing import Any

import msgspec


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


Request = Load | Reset | Step | Solution | End


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


Reply = Ready | Loaded | ResetDone | StepDone | SolutionDone | Ended | Failed

_encoder = msgspec.json.Encoder()
reply_decoder = msgspec.json.Decoder(Reply)


def encode_frame(request: Request) -> bytes:
    body = _encoder.encode(request)
    return len(body).to_bytes(4, "big") + body
