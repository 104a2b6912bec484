"""Fixtures of the engine tests: `small_run`, a hand-made run directory with known numbers (run_builder.py);
`qwen3_4b`, a model folder holding only Qwen3-4B's published config.json (what placement and memory plans read)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from run_builder import SmallRun, make_small_run


@pytest.fixture
def small_run(tmp_path) -> SmallRun:
    return make_small_run(tmp_path / "run")


@pytest.fixture
def qwen3_4b(tmp_path) -> Path:
    folder = tmp_path / "qwen3-4b"
    folder.mkdir()
    shutil.copy(Path(__file__).parents[1] / "learner" / "data" / "qwen3-4b-config.json", folder / "config.json")
    return folder
