"""`eval Qwen/Qwen3-4B`: a Hugging Face hub id names its snapshot in the Hugging Face cache (engine/protocol/model_hub.py),
found offline in a cache the test builds in huggingface_hub's layout; one that is not cached is one line."""

from __future__ import annotations

import shutil

import pytest

from actors.evaluation.cli import resolve_model
from engine.protocol import model_hub
from engine.protocol.errors import describe_failure

COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # read once when huggingface_hub was imported
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv(model_hub.USER_OFFLINE, raising=False)
    return cache


def test_a_cached_hub_id_is_evaluated_from_its_snapshot(hub_cache, tiny_model_path):
    repo = hub_cache / "models--owner--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    shutil.copytree(tiny_model_path, repo / "snapshots" / COMMIT)
    assert resolve_model("owner/tiny", None) == ("owner/tiny", str(repo / "snapshots" / COMMIT))
    assert resolve_model("owner/tiny", "step-000004")[1] == str(repo / "snapshots" / COMMIT)  # --checkpoint: run directories only


def test_an_uncached_hub_id_is_one_line(hub_cache):
    with pytest.raises(model_hub.HubModelError) as caught:
        resolve_model("owner/missing", None)
    text, code = describe_failure(caught.value)
    assert code == 2 and len(text.splitlines()) == 1 and "hf download owner/missing" in text
