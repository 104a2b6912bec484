"""What a sandbox pool is asked for: one typed `SandboxSettings`, built once from the run's `[sandbox]` section.

    settings = SandboxSettings.from_config(config.sandbox)            # the worker, revalidation, the evaluation
    async with open_sandbox_pool(settings) as pool: ...
    async with open_sandbox_pool(workers=1, isolation="rlimits") as pool: ...   # tests and tools: the defaults, overridden

The defaults are the pool's own (a small pool for tests and the command line), not the `[sandbox]` section's.
"""

from __future__ import annotations

import math

import msgspec

from actors.sandbox.isolation import REQUESTS
from engine.protocol.config import SandboxConfig

LIMITS = ("workers", "step_timeout_s", "memory_mb", "episode_timeout_s", "play_timeout_s", "cpu_seconds",
          "max_output_bytes", "episodes_per_worker")


class SandboxSettings(msgspec.Struct, frozen=True, kw_only=True):
    workers: int = 2  # sandbox processes: episodes that can run at once
    step_timeout_s: float = 10.0  # one reset/step/tool call
    episode_timeout_s: float = 120.0  # the environment's own time in one episode (inside its calls, not between them)
    play_timeout_s: float = 3600.0  # wall clock from open to close, the wait for the model included (a stuck play)
    memory_mb: int = 1024  # address space of a worker
    cpu_seconds: int = 60  # CPU time of one episode
    max_output_bytes: int = 65536  # one reply of the worker
    episodes_per_worker: int = 200  # then the worker is replaced
    isolation: str = "auto"  # a key of isolation.REQUESTS

    def __post_init__(self) -> None:
        if self.isolation not in REQUESTS:
            raise ValueError(f"isolation must be one of {sorted(REQUESTS)}, got {self.isolation!r}")
        for name in LIMITS:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        # msgspec does not convert on construction: keep the types the worker and the clocks expect
        for name, kind in (("workers", int), ("step_timeout_s", float), ("episode_timeout_s", float), ("play_timeout_s", float),
                           ("memory_mb", int), ("cpu_seconds", int), ("max_output_bytes", int),
                           ("episodes_per_worker", int)):
            msgspec.structs.force_setattr(self, name, kind(getattr(self, name)))

    @classmethod
    def from_config(cls, sandbox: SandboxConfig, **overrides) -> SandboxSettings:
        """The run's `[sandbox]` section (with `overrides`, e.g. workers=1 for a fresh pool of one)."""
        fields = {name: getattr(sandbox, name) for name in cls.__struct_fields__}
        return cls(**(fields | overrides))
