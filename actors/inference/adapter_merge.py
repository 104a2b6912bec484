"""A published LoRA adapter turned into a full model folder, for a backend that loads only full models (vLLM).

    merger = AdapterMerger(base_folder)                 # the run's base model (what the adapter was trained on)
    folder = merger.merged(adapter_folder, version)     # a scratch folder: config.json + model.safetensors
    merger.close()                                      # the scratch folders removed

A LoRA learner (`learner.lora_rank > 0`) publishes only the adapter: adapter_config.json (r, lora_alpha, use_rslora,
target modules) and adapter_model.safetensors (peft's keys, `base_model.model.<module>.lora_A.weight` and
`.lora_B.weight`). Each adapted module's weight becomes W + scale * B @ A, scale = lora_alpha / r (lora_alpha /
sqrt(r) with rsLoRA), which is what peft's `merge_and_unload` computes; every other tensor is the base's. The adapter
is always relative to the base model, never to an earlier merge, so the base weights are read once and kept. The
newest KEEP merged folders stay on disk (a load in progress may still read the previous one).
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

from actors.inference.hf import ADAPTER_CONFIG

ADAPTER_WEIGHTS = "adapter_model.safetensors"
PREFIX = "base_model.model."
KEEP = 2


class AdapterMergeError(RuntimeError):
    """An adapter folder that does not fit the base model (a key with no base weight, a shape that does not match)."""


class AdapterMerger:
    def __init__(self, base_folder: str | Path):
        self.base_folder = Path(base_folder)
        self._base: dict | None = None
        self._scratch: Path | None = None  # made at the first merge (a full-model run never needs it)
        self._folders: list[Path] = []

    def _base_weights(self) -> dict:
        if self._base is None:
            from safetensors.torch import load_file

            files = sorted(self.base_folder.glob("*.safetensors"))
            if not files:
                raise AdapterMergeError(f"{self.base_folder} has no .safetensors weights to merge an adapter into")
            self._base = {}
            for file in files:
                self._base.update(load_file(str(file)))
        return self._base

    def merged_state(self, adapter_folder: str | Path) -> dict:
        """The base's tensors with the adapter merged into the modules it adapts (new tensors; the base is kept)."""
        import torch
        from safetensors.torch import load_file

        adapter_folder = Path(adapter_folder)
        config = json.loads((adapter_folder / ADAPTER_CONFIG).read_text())
        rank, alpha = int(config["r"]), float(config["lora_alpha"])
        scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
        lora = load_file(str(adapter_folder / ADAPTER_WEIGHTS))
        base = self._base_weights()
        state = dict(base)
        for key_a in sorted(k for k in lora if k.endswith(".lora_A.weight")):
            module = key_a[: -len(".lora_A.weight")]
            module = module[len(PREFIX):] if module.startswith(PREFIX) else module
            key_b = key_a[: -len(".lora_A.weight")] + ".lora_B.weight"
            weight_key = f"{module}.weight"
            if key_b not in lora or weight_key not in base:
                raise AdapterMergeError(f"{adapter_folder}: {key_a} has no {'lora_B' if key_b not in lora else 'base weight ' + weight_key}")
            w = base[weight_key]
            delta = lora[key_b].to(torch.float32) @ lora[key_a].to(torch.float32)
            if config.get("fan_in_fan_out"):
                delta = delta.T
            if delta.shape != w.shape:
                raise AdapterMergeError(f"{adapter_folder}: {module}'s update is {tuple(delta.shape)}, its weight {tuple(w.shape)}")
            state[weight_key] = (w.to(torch.float32) + scale * delta).to(w.dtype)
        return state

    def merged(self, adapter_folder: str | Path, version: int) -> Path:
        """A full model folder for `version`: the base's config files and the merged weights."""
        from safetensors.torch import save_file

        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="spade-merged-"))
        folder = self._scratch / f"v{version}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for name in ("config.json", "generation_config.json"):
            if (self.base_folder / name).is_file():
                shutil.copyfile(self.base_folder / name, folder / name)
        save_file({k: v.contiguous() for k, v in self.merged_state(adapter_folder).items()}, str(folder / "model.safetensors"),
                  metadata={"format": "pt"})
        self._folders.append(folder)
        while len(self._folders) > KEEP:
            shutil.rmtree(self._folders.pop(0), ignore_errors=True)
        return folder

    def close(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
        self._base = None
