"""Run directories: one engine at a time per run, and short socket addresses that differ per run."""

import os

import pytest

from engine.protocol.paths import RunInUse, RunPaths


def test_one_engine_at_a_time_per_run_directory(tmp_path):
    paths = RunPaths(tmp_path / "run")
    with paths.engine_lock():
        assert (paths.root / "engine.lock").read_text() == f"{os.getpid()}\n"
        with pytest.raises(RunInUse, match=rf"in use by a running engine \(pid {os.getpid()}\): stop it first, or add a worker"):
            with paths.engine_lock():
                pass
    with paths.engine_lock():  # released on exit (and by the kernel when the holder dies)
        pass


def test_socket_addresses_are_short_and_differ_per_run(tmp_path):
    a, b = RunPaths(tmp_path / ("x" * 200)), RunPaths(tmp_path / "y")
    assert len(a.worker_address) < 100 and a.worker_address != b.worker_address
    assert a.worker_address != a.learner_address
