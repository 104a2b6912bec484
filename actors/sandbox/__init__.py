"""Sandbox for model-written environments: a pool of isolated workers (`pool`, asked for with `settings`, its
levels in `isolation`, one environment instance in `episode`), the games' validator and the static checks both
settings start from (`validator`, `static_checks`; which validator a design gets is actors/settings.py's), and the
f-string brace repair (`repair`). It imports nothing else of actors/ (tests/test_import_rules.py)."""

from actors.sandbox.pool import (
    Episode, EpisodeFailed, IsolationLevel, IsolationWarning, PoolStatistics, SandboxPool, SandboxSettings,
    SandboxUnavailable, StepResult, open_sandbox_pool,
)

__all__ = [
    "Episode", "EpisodeFailed", "IsolationLevel", "IsolationWarning", "PoolStatistics", "SandboxPool",
    "SandboxSettings", "SandboxUnavailable", "StepResult", "open_sandbox_pool",
]
from actors.sandbox.repair import repair_fstring_braces  # noqa: E402
from actors.sandbox.validator import Check, Verdict  # noqa: E402

__all__ += ["Check", "Verdict", "repair_fstring_braces"]
