"""Learner checkpoints: a Hugging Face model folder plus everything needed to resume bit for bit.

    save_checkpoint(trainer, folder, step)   # every rank calls it (the state is gathered); rank 0 writes
    step = load_checkpoint(trainer, folder)  # every rank reads the folder and takes its own share

Layout of `folder` (written into `.tmp-<name>` and renamed, so a folder that exists is complete):
    model.safetensors, config.json, tokenizer files   from_pretrained(folder) loads the policy as it was, in fp32
                        (the master weights, whatever model.dtype the versions are published in)
    checkpoint.json     the step and policy version, for the engine (which loads no torch)
    trainer_state.pt    optimizer (full, keyed by parameter name), LR scheduler, step, updates, policy version,
                        optimizer steps, and the python / numpy / torch (and cuda) RNG states of every rank

With LoRA (`learner.lora_rank > 0`) the top-level model folder holds the merged weights (base + adapter, merged
on a copy), so `from_pretrained(folder)` still loads the policy; the adapter itself is in `adapter/`
(adapter_config.json + adapter_model.safetensors), and resuming loads the base model from the model path the
trainer was built with plus that adapter, so it stays bit for bit (the merged weights are only for outside use).

The optimizer state is keyed by parameter name (torch.distributed.checkpoint.state_dict), so a checkpoint
written by N processes loads into any number of them; RNG states are restored per rank when the world size
matches, else every rank takes rank 0's. `torch.load(..., weights_only=True)` reads the state file.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from engine.protocol.paths import CHECKPOINT_STATE, CHECKPOINT_SUMMARY
from learner import precision

if TYPE_CHECKING:
    from learner.trainer import Trainer

ADAPTER_DIR = "adapter"  # inside a LoRA checkpoint
ADAPTER_WEIGHTS = "adapter_model.safetensors"
FORMAT = 1

_GATHER = StateDictOptions(full_state_dict=True, cpu_offload=True)


def full_model_state_dict(trainer: Trainer) -> dict[str, torch.Tensor] | None:
    """The unsharded weights on CPU on rank 0 ({} on the others); None for a model FSDP2 does not shard (save the
    model as is). One process under FSDP2 (`learner.cpu_offload`) gathers too: its parameters are DTensors."""
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(trainer.model, FSDPModule):
        return None
    return get_model_state_dict(trainer.model, options=_GATHER)


def save_model_folder(trainer: Trainer, folder: Path, state_dict: dict[str, torch.Tensor] | None, *, dtype: str = "float32") -> None:
    """Rank 0: the model (safetensors) and tokenizer as a folder `from_pretrained` loads, the weights in `dtype`
    (a published version: `model.dtype`; a checkpoint: float32, the master weights as they are)."""
    if dtype != "float32":
        state = state_dict if state_dict is not None else trainer.model.state_dict()
        state_dict = precision.cast_state_dict(state, precision.torch_dtype(dtype))
    trainer.model.save_pretrained(folder, state_dict=state_dict, safe_serialization=True)
    trainer.tokenizer.save_pretrained(folder)
    if dtype != "float32":  # save_pretrained wrote the master weights' dtype into config.json
        config_file = Path(folder) / "config.json"
        config = json.loads(config_file.read_text())
        config["dtype"] = dtype
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def save_adapter_folder(trainer: Trainer, folder: Path) -> None:
    """Rank 0, LoRA: only the adapter (adapter_config.json naming the base model, adapter_model.safetensors)."""
    trainer.model.save_pretrained(folder, safe_serialization=True)
    (Path(folder) / "README.md").unlink(missing_ok=True)  # peft's model card: not needed by the workers


def save_merged_model_folder(trainer: Trainer, folder: Path) -> None:
    """Rank 0, LoRA: base + adapter merged (on a copy, the trainer's model is untouched) as a from_pretrained folder."""
    import copy

    merged = copy.deepcopy(trainer.model).merge_and_unload()
    merged.save_pretrained(folder, safe_serialization=True)
    trainer.tokenizer.save_pretrained(folder)
    del merged


def save_checkpoint(trainer: Trainer, folder: Path, step: int) -> Path:
    folder = Path(folder)
    weights = full_model_state_dict(trainer)
    optimizer = get_optimizer_state_dict(trainer.model, trainer.optimizer, options=_GATHER)
    rng = trainer.dist.all_gather_objects(capture_rng())
    if trainer.dist.is_main:
        tmp = folder.with_name(f".tmp-{folder.name}")
        shutil.rmtree(tmp, ignore_errors=True)
        if trainer.lora:
            save_merged_model_folder(trainer, tmp)
            save_adapter_folder(trainer, tmp / ADAPTER_DIR)
        else:
            save_model_folder(trainer, tmp, weights)
        state = {
            "format": FORMAT,
            "lora": trainer.lora,
            "step": step,
            "version": trainer.version,
            "updates": trainer.updates,
            "optimizer_steps": trainer.optimizer_steps,
            "world_size": trainer.dist.world_size,
            "optimizer": optimizer,
            "scheduler": trainer.scheduler.state_dict(),
            "rng": rng,
        }
        torch.save(state, tmp / CHECKPOINT_STATE)
        # What the engine reads without torch (`up --resume` refuses a store older than the checkpoint).
        (tmp / CHECKPOINT_SUMMARY).write_text(json.dumps({"step": step, "version": trainer.version, "lora": trainer.lora}))
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    trainer.dist.barrier()  # no rank goes on (and maybe reads it) before the folder is complete
    return folder


def load_checkpoint(trainer: Trainer, folder: Path) -> int:
    """Restore weights, optimizer, scheduler, counters and RNG states; returns the checkpoint's step."""
    folder = Path(folder).resolve()
    state_path = folder / CHECKPOINT_STATE
    if not state_path.is_file():
        raise FileNotFoundError(f"{folder} is not a learner checkpoint: {CHECKPOINT_STATE} is missing")
    state = torch.load(state_path, map_location="cpu", weights_only=True)
    if state.get("format") != FORMAT:
        raise ValueError(f"{state_path} has format {state.get('format')!r}; this learner reads format {FORMAT}")
    if bool(state.get("lora", False)) != trainer.lora:
        kind = "a LoRA adapter" if state.get("lora") else "full fine-tuning"
        raise ValueError(
            f"{folder} is a checkpoint of {kind}, but learner.lora_rank is {trainer.config.lora_rank}: "
            "resume with the learner settings the checkpoint was written with"
        )
    full = StateDictOptions(full_state_dict=True)
    if trainer.lora:
        load_adapter_weights(trainer.model, folder / ADAPTER_DIR)
    else:
        set_model_state_dict(trainer.model, read_safetensors(folder), options=full)
    set_optimizer_state_dict(trainer.model, trainer.optimizer, state["optimizer"], options=full)
    trainer.scheduler.load_state_dict(state["scheduler"])
    trainer.version = int(state["version"])
    trainer.updates = int(state["updates"])
    trainer.optimizer_steps = int(state["optimizer_steps"])
    rng = state["rng"]
    restore_rng(rng[trainer.dist.rank] if len(rng) == trainer.dist.world_size else rng[0])
    return int(state["step"])


def load_adapter_weights(model, folder: Path) -> None:
    """Copy the adapter saved in `folder` (save_adapter_folder) into the peft model; every adapter tensor must match."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    file = Path(folder) / ADAPTER_WEIGHTS
    if not file.is_file():
        raise FileNotFoundError(f"{folder} holds no {ADAPTER_WEIGHTS}")
    result = set_peft_model_state_dict(model, load_file(file))
    missing = [k for k in result.missing_keys if "lora_" in k]
    if missing or result.unexpected_keys:
        raise ValueError(f"{file} does not match the LoRA adapter: missing {missing[:3]}, unexpected {result.unexpected_keys[:3]}")


def read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder} holds no *.safetensors weights")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        weights.update(load_file(file))
    return weights


def capture_rng() -> dict:
    """This process's RNG states, in types `torch.load(weights_only=True)` accepts."""
    kind, key, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(key.astype(np.int64)), int(pos), int(has_gauss), float(cached)),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    random.setstate(state["python"])
    kind, key, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, key.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
