"""Fixtures of the engine tests: `small_run`, a hand-made run directory with known numbers (run_builder.py)."""

from __future__ import annotations

import pytest

from run_builder import SmallRun, make_small_run


@pytest.fixture
def small_run(tmp_path) -> SmallRun:
    return make_small_run(tmp_path / "run")
