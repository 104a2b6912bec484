"""Helpers for the scripted `up` runs of test_paper_preset.py and test_ablations.py (after test_up.py's own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
PREFILL = json.dumps(chr(96) * 3 + "python" + chr(10))


def write_script(tmp_path: Path, designer: list[str] | None = None) -> Path:
    """A scripted backend's completions: the designer writes pick_env.py, the agent picks 1 or 2."""
    valid = (DATA / "pick_env.py").read_text()
    script = {
        "designer": designer or [valid + "```\n"],
        "hint": ["The hidden number is one of two; answer with one of them."],
        "agent": ["\\boxed{1}", "I pick \\boxed{2}", "hmm \\boxed{1}"],
    }
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return path


def up(tiny_model_path: str, run_dir: Path, script: Path, steps: int | None, *, preset: str = "default", sets=(), timeout=300,
       args=()):
    """`up --no-live` on the scripted backend, small enough for 2 cores; `sets` are more `--set` overrides, `args`
    more arguments; `steps` None: no --steps."""
    argv = [
        sys.executable, "-m", "engine.cli", "up", "--no-live", "--preset", preset,
        "--model", tiny_model_path, "--run-dir", str(run_dir), *(["--steps", str(steps)] if steps is not None else []), *args,
        "--set", "inference.backend=scripted", "--set", f"inference.script={json.dumps(str(script))}",
        "--set", f"play.designer_prefill={PREFILL}", "--set", "play.max_turns=2",
        "--set", "curriculum.design_attempts=1", "--set", "sandbox.workers=4",
    ]
    for text in sets:
        argv += ["--set", text]
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


def metrics_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
