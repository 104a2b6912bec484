"""`model.path` / `--model`: a local folder as it is, or a Hugging Face hub id resolved to its cached snapshot folder.

The cache is one the test builds in the layout huggingface_hub reads (models--owner--name/refs/main naming a commit,
snapshots/<commit>/ holding the files), and the lookups go through huggingface_hub's own offline resolution
(try_to_load_from_cache); nothing is downloaded. The download itself runs in a child process, here pointed at a
hub address that refuses connections, so it fails as a machine without a network does.
"""

import shutil

import pytest

from engine.protocol import model_hub
from engine.protocol.errors import describe_failure
from engine.protocol.model_hub import HubModelError, fetch_hub_model, is_hub_id
from engine.tools.models import ModelError, check_model_folder, resolve_model_folder

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache of the test's own, offline (as bin/spade-engine's user set it)."""
    from huggingface_hub import constants

    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # read once when huggingface_hub was imported
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv(model_hub.USER_OFFLINE, raising=False)
    return cache


def cache_model(cache, repo_id: str, source) -> object:
    """`source`'s files as the cached snapshot of `repo_id`'s main revision; the snapshot folder."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    shutil.copytree(source, snapshot)
    return snapshot


def test_a_hub_id_is_the_owner_name_shape_that_is_no_path_here(tmp_path, monkeypatch):
    assert is_hub_id("Qwen/Qwen3-4B") and is_hub_id("meta-llama/Llama-3.1-8B-Instruct")
    for path in ("/models/x", "./x/y", "~/x/y", "x", "a/b/c", "a--b/c", "a/b..c", "runs/X@initial"):
        assert not is_hub_id(path), path
    (tmp_path / "owner" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert not is_hub_id("owner/name")  # a folder that exists is a path


def test_a_cached_hub_id_resolves_to_its_snapshot_folder_offline(hub_cache, tiny_model_path, monkeypatch):
    snapshot = cache_model(hub_cache, "owner/tiny", tiny_model_path)
    monkeypatch.setattr(model_hub.subprocess, "run", lambda *a, **k: pytest.fail("a cached model started a download"))
    said = []
    assert fetch_hub_model("owner/tiny", say=said.append) == snapshot
    assert resolve_model_folder("owner/tiny", say=said.append) == snapshot.resolve()
    assert said == []


def test_an_uncached_hub_id_offline_is_one_line_naming_the_fix(hub_cache, tiny_model_path):
    cache_model(hub_cache, "owner/tiny", tiny_model_path)
    with pytest.raises(HubModelError) as caught:
        resolve_model_folder("owner/missing")
    text, code = describe_failure(caught.value)
    assert code == 2 and len(text.splitlines()) == 1
    assert text == (
        f"error: model owner/missing is neither a local folder nor in the Hugging Face cache ({hub_cache}), and the hub "
        "cannot be reached (HF_HUB_OFFLINE is set): download it where there is a network (hf download owner/missing) "
        "and bring that cache here (HF_HOME), or give a local model folder"
    )


def test_a_cached_snapshot_missing_a_shard_is_not_taken(hub_cache, tiny_model_path, tmp_path):
    """An interrupted download: the index names a shard the snapshot lacks, so it is fetched again (here: offline)."""
    source = tmp_path / "sharded"
    shutil.copytree(tiny_model_path, source)
    (source / "model.safetensors.index.json").write_text('{"weight_map": {"a": "model.safetensors", "b": "model-2.safetensors"}}')
    cache_model(hub_cache, "owner/partial", source)
    with pytest.raises(HubModelError, match="neither a local folder nor in the Hugging Face cache"):
        fetch_hub_model("owner/partial")
    with pytest.raises(ModelError, match=r"lacks 1 weight file\(s\) its index names \(model-2.safetensors\)"):
        check_model_folder(source)


def test_a_download_that_cannot_reach_the_hub_is_one_line(hub_cache, monkeypatch):
    """Online as far as the user is concerned (no HF_HUB_OFFLINE), but the hub refuses connections: the child that
    downloads fails, and its reason comes back as one line."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    said = []
    with pytest.raises(HubModelError) as caught:
        fetch_hub_model("owner/missing", say=said.append)
    assert said == [f"fetching owner/missing from the Hugging Face hub into {hub_cache} (once: later runs use the cached copy)..."]
    text, code = describe_failure(caught.value)
    assert code == 2 and len(text.splitlines()) == 1
    assert "error: model owner/missing is neither a local folder nor in the Hugging Face cache" in text
    assert "the hub cannot be reached (" in text and "hf download owner/missing" in text


def test_bin_spade_engine_keeps_the_users_offline_setting(hub_cache, monkeypatch):
    """bin/spade-engine sets HF_HUB_OFFLINE=1 for every process; the user's own value, kept aside, decides."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv(model_hub.USER_OFFLINE, "")
    assert not model_hub.hub_offline()
    monkeypatch.setenv(model_hub.USER_OFFLINE, "1")
    assert model_hub.hub_offline()


def test_a_path_keeps_its_folder_errors(tmp_path):
    with pytest.raises(ModelError, match=f"model path {tmp_path / 'nope'} does not exist"):
        resolve_model_folder(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="is not a Hugging Face model folder"):
        resolve_model_folder(tmp_path / "empty")


def test_up_writes_the_snapshot_folder_for_the_workers_and_resume(hub_cache, tiny_model_path, tmp_path, monkeypatch):
    """`up --model owner/tiny`: config.toml's model.path and run.json's model_path name the snapshot folder (the
    processes of the run, and --resume, read those offline); the run itself is not started here."""
    import json

    from engine import cli
    from engine.protocol.config_loading import read_config_file

    snapshot = cache_model(hub_cache, "owner/tiny", tiny_model_path)
    monkeypatch.setattr(cli, "_run_engine", lambda config, paths, seeds, live: 0)
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    assert cli.main(["up", "--model", "owner/tiny", "--run-dir", str(run), "--no-live"]) == 0
    assert read_config_file(run / "config.toml").model.path == str(snapshot.resolve())
    assert json.loads((run / "run.json").read_text())["model_path"] == str(snapshot.resolve())
