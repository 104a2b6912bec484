"""End to end: a peer that lies changes nothing that is trained or loaded, and the run stays resumable.

A forged rollout worker (a DEALER driven from the test) joins a scripted `up` run like a worker and answers the
plays it is handed with a NaN return and with a token id outside the model's vocabulary (engine/peers/result_checks.py);
a forged learner sends `PolicyPublished` on the run's learner socket (engine/peers/auth.py's learner gate).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import numpy as np
import zmq

from engine.batches import stored_batch_samples
from engine.protocol.messages import (
    DesignTask,
    EngineToWorker,
    Heartbeat,
    PlayResult,
    PlayTask,
    PolicyPublished,
    PolicyUpdate,
    Sample,
    TurnRecord,
    ValidateTask,
    WorkerBye,
    WorkerHello,
    pack_floats,
    pack_ints,
    pack_mask,
    unpack_floats,
    unpack_ints,
    unpack_mask,
)
from engine.protocol.keys import read_ipc_secret
from engine.protocol.sample_values import sample_problem
from engine.protocol.paths import RunPaths
from storage.store import Store
from tests.e2e.helpers import state_and_done_ids, up_command, up_script, wait_for_text

STEPS = 2
VOCAB = 4096  # the tiny model's
MARK = np.float32(-0.0123456)  # the forged samples' behaviour log-probs: found in no sample the run keeps


def _forged_play(task: PlayTask, version: int, kind: str) -> PlayResult:
    """kind "nan": a NaN return (and turn reward; "nan-sample": the sample's reward too); "token": an id past the vocabulary."""
    tokens = [5, 6, 7, VOCAB + 7 if kind == "token" else 8]
    value = math.nan if kind.startswith("nan") else 1.0
    sample = Sample(
        sample_id=task.task_id, role="agent", env_id=task.env_id, skill=task.skill, arm=task.arm, step=task.step,
        tokens=pack_ints(tokens), loss_mask=pack_mask([0, 1, 1, 1]), logprobs=pack_floats([0.0, MARK, MARK, MARK]),
        versions=pack_ints([-1, version, version, version]), reward=value if kind != "nan" else 0.0, temperature=0.6,
    )
    turn = TurnRecord(action="1", parse_rule="boxed_first", reward=value, terminated=True, truncated=False, policy_version=version, observation_chars=9)
    return PlayResult(
        task_id=task.task_id, worker_id="forged", env_id=task.env_id, arm=task.arm, seed=task.seed, status="completed",
        failure="", episode_return=value, turns=[turn], agent=sample, tokens_generated=3, seconds=0.1,
    )


def _forged_worker(address: str, deadline: float, secret: str) -> list[str]:
    """Say hello like a worker (with the run's ipc secret: a local peer that can read the run's keys); answer plays with a NaN return, then an out-of-range token, then a NaN return again
    (its third rejected result: it is dropped); step aside (bye, hello again) for any other task. Returns what it sent."""
    decoder = msgspec.msgpack.Decoder(EngineToWorker)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, b"forged")
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(address)
    hello = WorkerHello(worker_id="forged", pid=os.getpid(), slots=1, isolation="none", backend="forged", policy_version=0, secret=secret)
    sock.send(msgspec.msgpack.encode(hello))
    sent, version = [], 0
    try:
        while len(sent) < 3 and time.monotonic() < deadline:
            if not sock.poll(100):
                continue
            message = decoder.decode(sock.recv())
            match message:
                case PolicyUpdate():
                    version = message.version
                case PlayTask():
                    kind = ("nan", "token", "nan-sample")[len(sent)]
                    sock.send(msgspec.msgpack.encode(_forged_play(message, version, kind)))
                    sent.append(kind)
                case DesignTask() | ValidateTask():  # not ours to answer: its lease ends, another worker gets it
                    sock.send(msgspec.msgpack.encode(WorkerBye(worker_id="forged")))
                    time.sleep(0.3)
                    sock.send(msgspec.msgpack.encode(hello))
        time.sleep(0.5)  # the last answer on its way out
    finally:
        sock.close()
    return sent


def _check_resumable(processes, run_dir: Path, steps: int) -> None:
    again = processes.run([sys.executable, "-m", "engine.cli", "up", "--no-live", "--resume", str(run_dir), "--steps", str(steps)], timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    store = Store.open(run_dir / "store", readonly=True)
    state, batches = store.state(), list(store.batches())
    store.close()
    assert state.finished and state.steps_done == steps and state.policy_version == len(batches)


def _published_weights_are_finite(run_dir: Path) -> None:
    from safetensors.numpy import load_file

    # the newest published version (with LoRA, only adapter_model.safetensors) and the latest
    # checkpoint (model.safetensors, and with LoRA the adapter in adapter/)
    folders = [max((run_dir / "policy").glob("v*")), (run_dir / "checkpoints" / "latest").resolve()]
    for folder in folders:
        files = sorted(folder.rglob("*.safetensors"))
        assert files, f"{folder} holds no weights"
        for file in files:
            weights = load_file(str(file))
            assert weights and all(np.isfinite(w).all() for w in weights.values()), file


def test_a_worker_that_sends_nan_and_out_of_range_tokens_changes_nothing_trained(tiny_model_path, tmp_path, processes):  # noqa: F811
    run_dir = tmp_path / "run"
    output = tmp_path / "engine.out"
    with open(output, "w") as out:
        engine = processes.popen(up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=STEPS), stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    wait_for_text(output, "worker w0 joined", deadline)  # so that the engine does not start on the forged worker alone
    sent = _forged_worker(RunPaths(run_dir).worker_address, deadline, read_ipc_secret(RunPaths(run_dir).keys))
    assert sent == ["nan", "token", "nan-sample"], (sent, output.read_text())
    processes.track(engine.pid)
    assert engine.wait(timeout=300) == 0, output.read_text()
    text = output.read_text()
    assert "rejected the result of worker forged" in text and "its episode return nan is not a finite number in [-1, 1]" in text
    assert "sample reward is nan, not a finite number" in text
    assert "token id 4103 is outside the model's vocabulary [0, 4096)" in text
    assert "dropped worker forged: 3 of its results failed the engine's checks" in text
    assert json.loads((run_dir / "run.json").read_text())["result_checks"] == {"refused_results": 3, "dropped_workers": 1}

    store = Store.open(run_dir / "store", readonly=True)
    try:
        kept = [t.sample for t in store.trajectories()]
        trained = [s for record in store.batches() for s in stored_batch_samples(store, record)]
        returns = [t.episode_return for t in store.trajectories()]
        state = store.state()
    finally:
        store.close()
    assert trained and all(math.isfinite(r) for r in returns)
    for sample in kept + trained:  # nothing the forged worker sent is stored, let alone trained
        assert sample_problem(sample, vocab_size=VOCAB) is None, sample.sample_id
        assert MARK not in unpack_floats(sample.logprobs)[unpack_mask(sample.loss_mask) == 1], sample.sample_id
        assert unpack_ints(sample.tokens).max() < VOCAB
    assert state.finished and state.policy_version == STEPS + 1
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(r["learner_loss"]) and not r["learner"].get("skipped_nonfinite") and "refused_batch" not in r["learner"] for r in rows)
    _published_weights_are_finite(run_dir)
    _check_resumable(processes, run_dir, STEPS + 1)
    _published_weights_are_finite(run_dir)


def test_a_forged_policy_published_changes_nothing(tiny_model_path, tmp_path, processes):  # noqa: F811
    """A DEALER that is not the engine's learner sends PolicyPublished for a version 99 at a real model folder: the
    workers never load it, the store and the metrics never see it (the learner's identity: engine/peers/auth.py)."""
    run_dir = tmp_path / "run"
    evil = tmp_path / "evil-policy"
    shutil.copytree(tiny_model_path, evil)
    output = tmp_path / "engine.out"
    with open(output, "w") as out:
        engine = processes.popen(up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=STEPS), stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (run_dir / "metrics.jsonl").exists():  # the learner is up and has published
        time.sleep(0.2)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(RunPaths(run_dir).learner_address)
    for _ in range(3):
        sock.send(msgspec.msgpack.encode(PolicyPublished(version=99, path=str(evil), step=0, metrics={"loss": 123.0})))
        time.sleep(0.3)
    sock.close()
    processes.track(engine.pid)
    assert engine.wait(timeout=300) == 0, output.read_text()

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows] == list(range(1, STEPS + 2)) and all(r["learner_loss"] != 123.0 for r in rows)
    store = Store.open(run_dir / "store", readonly=True)
    try:
        state, batches = store.state(), list(store.batches())
        versions = {int(v) for t in store.trajectories() for v in unpack_ints(t.sample.versions)}
    finally:
        store.close()
    assert state.policy_version == len(batches) == STEPS + 1
    assert max(versions) <= STEPS  # every token was sampled by a version the learner published
    assert str(evil) not in (run_dir / "logs" / "worker-w0.log").read_text()
    _check_resumable(processes, run_dir, STEPS + 1)


def _silent_workers(address: str, deadline: float, stop, secrets: dict[str, str]) -> list[str]:
    """One peer per `secrets` item (identity: the secret its hello carries), all connected at once: each says hello,
    heartbeats (counting the tasks it read, as a worker does), takes what is sent and never answers. Returns the task
    ids they were sent."""
    decoder = msgspec.msgpack.Decoder(EngineToWorker)
    socks = {}
    for identity, secret in secrets.items():
        sock = socks[identity] = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, identity.encode())
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(address)
        sock.send(msgspec.msgpack.encode(WorkerHello(worker_id=identity, pid=os.getpid(), slots=1, isolation="none", backend="silent", policy_version=0, secret=secret)))
    taken, beat = [], 0.0
    received = dict.fromkeys(socks, 0)
    try:
        while time.monotonic() < deadline and not stop():
            if time.monotonic() - beat > 1.0:
                for identity, sock in socks.items():
                    sock.send(msgspec.msgpack.encode(Heartbeat(worker_id=identity, policy_version=0, busy=received[identity], tasks_received=received[identity])))
                beat = time.monotonic()
            for identity, sock in socks.items():
                if sock.poll(50):
                    message = decoder.decode(sock.recv())
                    if isinstance(message, (PlayTask, DesignTask, ValidateTask)):
                        taken.append(message.task_id)
                        received[identity] += 1
    finally:
        for sock in socks.values():
            sock.close()
    return taken


def test_a_worker_that_holds_tasks_and_never_answers_is_timed_out_and_the_run_finishes(tiny_model_path, tmp_path, processes):  # noqa: F811
    """Its leases pass their deadline (worker.lease_factor x the task's own bound, small here), each task goes to the
    engine's own worker, the silent one is dropped after worker.max_timeouts, and the run ends as usual."""
    run_dir = tmp_path / "run"
    output = tmp_path / "engine.out"
    # deadlines of about 30 s: w0's scripted tasks take seconds even on a busy machine, the silent worker's never end
    extra = ["--set", "sandbox.episode_timeout_s=30", "--set", "sandbox.play_timeout_s=30", "--set", "inference.sync_timeout_s=1", "--set", "inference.request_timeout_s=2",
             "--set", "worker.lease_factor=1", "--set", "worker.max_timeouts=2"]
    with open(output, "w") as out:
        engine = processes.popen(up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=3, extra=extra), stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 420
    wait_for_text(output, "worker w0 joined", deadline)
    processes.track(engine.pid)
    taken = _silent_workers(RunPaths(run_dir).worker_address, deadline, stop=lambda: engine.poll() is not None,
                            secrets={"silent": read_ipc_secret(RunPaths(run_dir).keys)})
    assert engine.wait(timeout=60) == 0, output.read_text()
    text = output.read_text()
    assert len(taken) >= 2, (taken, text)
    assert "warning: worker silent did not answer task" in text and "silent is dropped (2 timed out)" in text, text
    counters = json.loads((run_dir / "run.json").read_text())["bus"]["workers"]
    assert counters["timed_out_tasks"] >= 2 and counters["timed_out_workers"] >= 1, counters
    state, done = state_and_done_ids(run_dir)
    assert state.finished and state.steps_done == 3
    assert set(taken) <= done, (taken, sorted(done))  # every task it held was done by w0 instead (it goes to a
    # worker that has not let it pass first)


def test_a_hello_without_the_runs_ipc_secret_is_refused_and_nothing_it_sends_is_stored(tiny_model_path, tmp_path, processes):  # noqa: F811
    """A local process that can open the run's ipc socket but lacks RUN_DIR/keys/ipc.secret says hello (with no
    secret, then a wrong one): it is never a worker, gets no task, and its forged results are not stored."""
    run_dir = tmp_path / "run"
    output = tmp_path / "engine.out"
    with open(output, "w") as out:
        engine = processes.popen(up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=STEPS), stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    wait_for_text(output, "worker w0 joined", deadline)
    processes.track(engine.pid)
    socket_dir = RunPaths(run_dir).socket_dir
    assert socket_dir.stat().st_mode & 0o777 == 0o700 and (RunPaths(run_dir).keys / "ipc.secret").stat().st_mode & 0o777 == 0o600
    address = RunPaths(run_dir).worker_address
    # both hellos go out at once, in the first second after w0 joined (the run lasts several more)
    taken = _silent_workers(address, time.monotonic() + 8, stop=lambda: engine.poll() is not None, secrets={"silent": "", "silent-2": "0" * 64})
    assert taken == [], taken  # never leased anything
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, b"forger")
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(address)
    forged = PlayTask(task_id="s0000-forged", env_id="e", skill="s", code="", hint="", arm="no_hint", seed=0, step=0)
    sock.send(msgspec.msgpack.encode(_forged_play(forged, 0, "nan")))
    time.sleep(0.5)
    sock.close()
    assert engine.wait(timeout=300) == 0, output.read_text()
    text = output.read_text()
    assert "refused a worker hello from silent: it lacks the run's ipc secret" in text, text
    assert "worker silent joined" not in text and "worker silent-2 joined" not in text and "worker forger joined" not in text
    counters = json.loads((run_dir / "run.json").read_text())["bus"]["workers"]
    assert counters["refused_hellos"] == 2, counters
    store = Store.open(run_dir / "store", readonly=True)
    try:
        assert all(t.sample_id != "s0000-forged" and MARK not in unpack_floats(t.sample.logprobs) for t in store.trajectories())
    finally:
        store.close()
