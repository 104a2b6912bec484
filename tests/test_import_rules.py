"""The package boundaries: the engine coordinates and never imports torch (so --help and the engine stay light)."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_engine_modules_do_not_import_torch():
    code = (
        "import sys\n"
        "import engine.cli, engine.run, engine.config, engine.messages, engine.transport, engine.dispatch, engine.rewards\n"
        "import engine.curriculum, engine.replay, engine.summary, storage.store, storage.memory\n"
        "heavy = [m for m in ('torch', 'transformers', 'vllm') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
