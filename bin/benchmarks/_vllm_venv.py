"""For the benchmarks that need vLLM (inference, eval): run the calling script again from .venv-vllm when vLLM does
not import here, making that venv first if it is missing (bin/_setup.sh `spade_setup_vllm`). Not a bench itself:
`bin/bench` lists no file whose name starts with an underscore."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def reexec_in_vllm_venv(script: str) -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        python = REPO / ".venv-vllm" / "bin" / "python"
        if os.environ.get("SPADE_BENCH_REEXEC"):
            sys.exit(f"vLLM does not import in {sys.executable} either: run bin/test --vllm once to make .venv-vllm")
        subprocess.run(["bash", "-c", f"source '{REPO}/bin/_setup.sh' && spade_setup_vllm"], check=True)
        os.environ["SPADE_BENCH_REEXEC"] = "1"
        os.execv(str(python), [str(python), script, *sys.argv[1:]])
