"""Sandbox for model-written environments: a pool of isolated workers (`pool`, asked for with `settings`, its
levels in `isolation`, one environment instance in `episode`), the validator every design passes before it is
played (`validator`, `static_checks`), the f-string brace repair (`repair`), and the two command-line entry
points the engine's CLI calls (`cli`)."""

from actors.sandbox.pool import (
    Episode, EpisodeFailed, IsolationLevel, IsolationWarning, PoolStatistics, SandboxPool, SandboxSettings,
    SandboxUnavailable, StepResult, open_sandbox_pool,
)

__all__ = [
    "Episode", "EpisodeFailed", "IsolationLevel", "IsolationWarning", "PoolStatistics", "SandboxPool",
    "SandboxSettings", "SandboxUnavailable", "StepResult", "open_sandbox_pool",
]
from actors.sandbox.repair import repair_fstring_braces  # noqa: E402
from actors.sandbox.validator import Check, Verdict, validate_environment  # noqa: E402

__all__ += ["Check", "Verdict", "repair_fstring_braces", "validate_environment"]
