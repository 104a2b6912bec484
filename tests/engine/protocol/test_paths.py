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


def test_the_socket_folder_is_made_owner_only_and_a_loosened_or_foreign_one_is_refused(tmp_path):
    import os

    import pytest

    from engine.protocol.paths import BadPath, RunPaths, ensure_private_dir

    paths = RunPaths(tmp_path / "run")
    assert paths.worker_address == f"ipc://{paths.socket_dir}/workers.sock" and str(os.getuid()) in paths.socket_dir.name
    folder = tmp_path / "sockets"
    ensure_private_dir(folder, "the run's socket folder")
    assert folder.stat().st_mode & 0o777 == 0o700
    ensure_private_dir(folder, "the run's socket folder")  # again: it is ours and private
    folder.chmod(0o755)
    with pytest.raises(BadPath, match=r"is open to other users \(mode 755\): chmod 700 it, or remove it"):
        ensure_private_dir(folder, "the run's socket folder")
    link = tmp_path / "link"
    link.symlink_to(folder)
    with pytest.raises(BadPath, match="is not a folder"):
        ensure_private_dir(link, "the run's socket folder")
    if os.getuid() == 0:  # root can hand a folder to another user
        other = tmp_path / "other"
        other.mkdir(mode=0o700)
        os.chown(other, 12345, 12345)
        with pytest.raises(BadPath, match=r"belongs to another user \(uid 12345\)"):
            ensure_private_dir(other, "the run's socket folder")
