"""A disk that fills during a run: one line saying so, everything committed kept, and a resume once there is room.

The store lives on a tiny tmpfs (in a mount namespace of the test's own, so nothing leaks), most of it taken by a
filler file; the run fills the rest, stops with the "store full" line, and after the filler is removed
`up --resume` finishes the run.
"""

import shlex
import shutil
import subprocess
import sys

import pytest

from storage.store import Store
from tests.e2e.helpers import REPO, subprocess_env, up_command, up_script

SIZE = 4 * 1024 * 1024
LEFT_FREE = 400 * 1024  # room for the seeds and a few steps, not for the whole run


def _can_mount_tmpfs(tmp_path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    result = subprocess.run(["unshare", "-m", "sh", "-c", f'mount -t tmpfs -o size=1m tmpfs "{probe}"'], capture_output=True, timeout=20)
    return result.returncode == 0


def test_a_full_disk_stops_the_run_in_one_line_and_resume_finishes_it(tiny_model_path, tmp_path):
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("needs root (or user namespaces) to mount a small tmpfs: unshare -m with mount -t tmpfs failed")
    run_dir = tmp_path / "run"
    store = run_dir / "store"
    store.mkdir(parents=True)
    up = up_command(tiny_model_path, run_dir, up_script(tmp_path), steps=12)
    resume = [sys.executable, "-m", "engine.cli", "up", "--no-live", "--resume", str(run_dir)]
    out = tmp_path / "out"
    out.mkdir()
    script = "\n".join([
        f'mount -t tmpfs -o size={SIZE} tmpfs "{store}"',
        f'head -c {SIZE - LEFT_FREE} /dev/zero > "{store}/filler" 2>/dev/null || true',
        f'{shlex.join(up)} > "{out}/first.out" 2> "{out}/first.err"; echo $? > "{out}/first.code"',
        f'cp -a "{store}/." "{out}/store-after-full/"',
        f'rm "{store}/filler"',
        f'{shlex.join(resume)} > "{out}/second.out" 2> "{out}/second.err"; echo $? > "{out}/second.code"',
        f'cp -a "{store}/." "{out}/store-final/"',
    ])
    (out / "store-after-full").mkdir()
    (out / "store-final").mkdir()
    subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=REPO, env=subprocess_env(), timeout=900, check=True)
    first_code, first_err = int((out / "first.code").read_text()), (out / "first.err").read_text()
    assert first_code == 1, first_err
    errors = [line for line in first_err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "full" in errors[0] and str(store) in errors[0], first_err
    assert "Traceback" not in first_err
    full = Store.open(out / "store-after-full", readonly=True)
    done_when_full = full.state().steps_done
    full.close()
    assert 0 < done_when_full < 12, f"the disk should fill mid-run (steps done: {done_when_full}): adjust LEFT_FREE"
    second_code = int((out / "second.code").read_text())
    assert second_code == 0, (out / "second.out").read_text() + (out / "second.err").read_text()
    assert f"resume: {done_when_full} steps done" in (out / "second.out").read_text()
    final = Store.open(out / "store-final", readonly=True)
    state = final.state()
    final.close()
    assert state.finished and state.steps_done == 12
