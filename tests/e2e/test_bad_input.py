"""Bad input, bad places and bad stores: one line naming the thing and the fix, the right status, nothing changed.

Every command runs as a user runs it: `python -P -m engine.cli ...` from a working directory of its own (paths
are the user's, relative to it), with the repository on PYTHONPATH only.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.protocol.config_loading import dump_config, load_config
from storage.records import EnvironmentRecord
from storage.store import Store

REPO = Path(__file__).resolve().parents[2]
VALID_ENV = REPO / "tests" / "e2e" / "data" / "pick_env.py"


def cli(args: list[str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-P", "-m", "engine.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root with its size and modification time; LMDB's lock.mdb (its reader table, which every
    reader updates, and which holds no data) only by its presence."""
    return {
        str(p.relative_to(root)): (0, 0) if p.name == "lock.mdb" else (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*")) if p.is_file()
    }


def make_run(root: Path, *, batches: int = 0) -> Path:
    """A finished-looking run directory: config.toml and a store with one environment (no processes)."""
    root.mkdir(parents=True)
    (root / "config.toml").write_text(dump_config(load_config(overrides=["run.steps=1"])))
    store = Store.open(root / "store")
    with store.batch() as batch:
        batch.put_environment(EnvironmentRecord(
            env_id="seed-pick", skill="Logical Deduction", step_created=-1, source="seed", passage_id="", attempt=0,
            code=VALID_ENV.read_text(), reply="", hint="", valid=True, reason="", checks=[], designer_sample_id="",
            worker_id="", created_at=0.0,
        ))
        state = store.state()
        state.batches = batches
        batch.put_state(state)
    store.close()
    return root


def damage(data: Path, how: str) -> None:
    raw = data.read_bytes()
    if how == "truncated":
        data.write_bytes(raw[: len(raw) // 2])
    elif how == "empty":
        data.write_bytes(b"")
    elif how == "scrambled":  # every page after the two meta pages overwritten
        data.write_bytes(raw[:8192] + os.urandom(len(raw) - 8192))
    else:
        raise ValueError(how)


@pytest.fixture
def place(tmp_path):
    """The user's working directory, with a few files in it."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "binary.py").write_bytes(bytes(range(256)) * 4)
    (cwd / "empty.py").write_text("\n")
    (cwd / "a_file").write_text("not a folder")
    shutil.copy(VALID_ENV, cwd / "my_env.py")
    make_run(cwd / "run")
    garbled = make_run(cwd / "garbled")
    (garbled / "config.toml").write_text("[run\nsteps = = 3\n\x00")
    no_store = make_run(cwd / "no-store")
    shutil.rmtree(no_store / "store")
    older = make_run(cwd / "older", batches=2)
    (older / "checkpoints" / "step-000009").mkdir(parents=True)
    (older / "checkpoints" / "step-000009" / "checkpoint.json").write_text('{"step": 9, "version": 10, "lora": false}')
    (older / "checkpoints" / "latest").symlink_to("step-000009")
    return cwd


# (command, status, the start of the single line on stderr; {cwd} is the working directory)
CASES = {
    "replay of a folder that does not exist": (["replay", "nope"], 2, "error: run directory {cwd}/nope does not exist"),
    "report of a folder that does not exist": (["report", "nope"], 2, "error: run directory {cwd}/nope does not exist"),
    "replay of a folder that is no run": (["replay", "a_file"], 2, "error: run directory {cwd}/a_file does not exist"),
    "validate a binary file": (["validate", "binary.py"], 2, "error: environment file {cwd}/binary.py is not a UTF-8 text file"),
    "play a binary file": (["play", "binary.py", "x"], 2, "error: environment file {cwd}/binary.py is not a UTF-8 text file"),
    "validate an empty file": (["validate", "empty.py"], 2, "error: environment file {cwd}/empty.py is empty"),
    "validate a missing file": (["validate", "missing.py"], 2, "error: environment file {cwd}/missing.py does not exist"),
    "a worker address that is no address": (
        ["up", "--run-dir", "new", "--set", "worker.address=garbage"], 2, "error: worker.address = 'garbage' is not an address",
    ),
    "a run directory on a filesystem we cannot write": (["up", "--run-dir", "/proc/spade-run"], 2, "error: run directory /proc/spade-run cannot be written"),
    "a run directory inside a file": (["up", "--run-dir", "a_file/run"], 2, "error: run directory {cwd}/a_file/run cannot be made: {cwd}/a_file is a file"),
    "a run directory that is a file": (["up", "--run-dir", "a_file"], 2, "error: run directory {cwd}/a_file is a file, not a directory"),
    "a config file that is binary": (["up", "--run-dir", "new", "--config", "binary.py"], 2, "error: config file {cwd}/binary.py is not a UTF-8 text file"),
    "resume a run whose config is garbage": (["up", "--resume", "garbled"], 2, "error: the run's config {cwd}/garbled/config.toml cannot be read"),
    "resume a run without a store": (["up", "--resume", "no-store"], 2, "error: {cwd}/no-store has no store"),
    "resume a store older than the checkpoint": (["up", "--resume", "older"], 2, "error: the store in {cwd}/older/store records 2 training batches but the learner's checkpoint is at policy v10"),
    "resume a folder that does not exist": (["up", "--resume", "nope"], 2, "error: run directory {cwd}/nope does not exist"),
    "replay a step the run does not have": (["replay", "run", "--step", "999"], 2, "error: no trajectories match --step 999 in {cwd}/run/store (it holds no step yet)"),
    "an unknown option": (["up", "--stepz", "3"], 2, "error: unrecognized arguments: --stepz 3"),
    "a model folder that does not exist": (["up", "--run-dir", "new", "--model", "nope"], 2, "error: model path {cwd}/nope does not exist"),
    "a model path that is a file": (["up", "--run-dir", "new", "--model", "a_file"], 2, "error: model path {cwd}/a_file is not a folder"),
    # owner/name that is no path here is a hub id; offline (HF_HUB_OFFLINE=1) and not cached, it cannot be had
    "a hub id neither cached nor reachable": (
        ["up", "--run-dir", "new", "--model", "owner/missing"], 2,
        "error: model owner/missing is neither a local folder nor in the Hugging Face cache (",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_refused_command_says_one_line_and_changes_nothing(place, name):
    args, status, line = CASES[name]
    before = snapshot(place)
    result = cli(args, cwd=place)
    assert result.returncode == status, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(line.format(cwd=place)), lines[0]
    assert "Traceback" not in result.stderr
    assert snapshot(place) == before
    assert not (place / "new").exists()


def test_user_paths_are_relative_to_where_the_command_runs(place):
    result = cli(["validate", "my_env.py"], cwd=place)
    assert result.returncode == 0, result.stderr
    assert f"{place}/my_env.py: VALID" in result.stdout


@pytest.mark.parametrize("how", ["truncated", "empty", "scrambled"])
@pytest.mark.parametrize("command", ["replay", "report", "resume"])
def test_a_damaged_store_is_one_line_naming_the_file(place, how, command):
    damage(place / "run" / "store" / "data.mdb", how)
    before = snapshot(place)
    args = {"replay": ["replay", "run"], "report": ["report", "run"], "resume": ["up", "--resume", "run"]}[command]
    result = cli(args, cwd=place)
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)  # never a signal (-7 is SIGBUS)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("error: the LMDB store file") and f"{place}/run/store/data.mdb" in lines[0], lines[0]
    assert snapshot(place) == before


def _read_only(run: Path, args: list[str], cwd: Path, cache: Path | None = None) -> subprocess.CompletedProcess:
    """`args` run with `run` made read-only by a read-only bind mount in a mount namespace of its own."""
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", **({"XDG_CACHE_HOME": str(cache)} if cache else {}))
    command = [sys.executable, "-P", "-m", "engine.cli", *args]
    script = f'mount --bind "{run}" "{run}" && mount -o remount,bind,ro "{run}" && exec "$@"'
    return subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", *command], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def _can_bind_read_only(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.mkdir()
    try:
        result = subprocess.run(
            ["unshare", "-m", "sh", "-c", f'mount --bind "{probe}" "{probe}" && mount -o remount,bind,ro "{probe}" && ! touch "{probe}/x"'],
            capture_output=True, timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def test_a_read_only_run_is_replayed_and_reported_elsewhere_and_not_resumed(place, tmp_path):
    if not _can_bind_read_only(tmp_path):
        pytest.skip("needs root (or user namespaces) for a read-only bind mount: unshare -m with mount --bind failed")
    run = place / "run"
    before = snapshot(place)
    replay = _read_only(run, ["replay", "run", "--step", "999"], cwd=place)
    assert replay.returncode == 2 and "no trajectories match --step 999" in replay.stderr, replay.stderr  # it read the store
    report = _read_only(run, ["report", "run"], cwd=place, cache=tmp_path / "cache")
    assert report.returncode == 0 and len(report.stderr.strip().splitlines()) == 1, report.stderr
    assert "report.html cannot be written (read-only run): the report goes to" in report.stderr, report.stderr
    (written,) = (tmp_path / "cache" / "spade-engine" / "reports").glob("run-*-report.html")  # the user's folder
    assert f"wrote {written}" in report.stdout and "<html" in written.read_text()
    out = tmp_path / "elsewhere.html"
    elsewhere = _read_only(run, ["report", "run", "--out", str(out)], cwd=place)
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert out.read_text().startswith("<!DOCTYPE html>") or "<html" in out.read_text()
    resume = _read_only(run, ["up", "--resume", "run"], cwd=place)
    assert resume.returncode == 2 and len(resume.stderr.strip().splitlines()) == 1, resume.stderr
    assert f"run directory {run} cannot be written" in resume.stderr, resume.stderr
    assert snapshot(place) == before
