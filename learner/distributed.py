"""The learner on N processes of one node: the command that starts it, the process group, FSDP2, collectives.

    dist = init_distributed("auto")      # under torchrun: joins the group (nccl on cuda, gloo on cpu); alone: rank 0 of 1
    model = shard_model(model, dist)     # FSDP2: each decoder layer, then the root; a no-op for one process
    dist = init_distributed("auto", cpu_offload=True)        # alone: still a group (of one), for FSDP2's CPU offload
    model = shard_model(model, dist, cpu_offload=True)      # fp32 state in host RAM, the computed units on the GPU
    message = dist.broadcast(message)    # rank 0's object on every rank
    shares = split_by_tokens(lengths, dist.world_size)   # the same deterministic split on every rank

With `learner.world_size = N > 1` the engine runs (engine/peers/processes.py: `learner_command`) `python -m torch.distributed.run --standalone --nproc-per-node N
-m learner.train ...`. The same code runs as N CPU processes over gloo, which is how the tests check it.

Gradients are SUM-reduced (FSDP's divide factor set to 1): the trainer divides each role's loss by the role's token
count in the whole batch, so the sum over ranks is exactly the single-process gradient. Every FSDP forward and
backward is a collective, so every rank must run the same number of them; `split_by_tokens` is computed by every
rank for every rank, and a rank with fewer micro-batches runs empty ones (see learner/trainer.py).

`learner.cpu_offload` (FSDP2's CPUOffloadPolicy): each rank's shards of the fp32 parameters, their gradients and
AdamW's moments live in host RAM, AdamW steps on the CPU, and each unit is copied to the GPU (in the compute dtype)
for its forward and backward; the update is the same. It needs FSDP2, so one process makes a process group of one
for it. On the CPU the same code runs with nothing to move, which is how the tests check it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from engine.protocol.devices import select_gpus


def resolve_device(name: str) -> str:
    """"auto" is cuda when a GPU is visible, else cpu."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name not in ("cuda", "cpu"):
        raise ValueError(f"learner.device must be auto, cuda or cpu (got {name!r})")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("learner.device is cuda but no GPU is visible: set learner.device = 'auto' or 'cpu'")
    return name


@dataclass(frozen=True)
class Distributed:
    """This process's place in the learner group; `world_size == 1` means no process group at all."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device_type: str = "cpu"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def device(self):
        import torch

        return torch.device(self.device_type, self.local_rank) if self.device_type == "cuda" else torch.device("cpu")

    @property
    def backend(self) -> str:
        return "nccl" if self.device_type == "cuda" else "gloo"

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` (pickled), returned on every rank."""
        if self.world_size == 1:
            return obj
        import torch.distributed as dist

        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0, device=self._object_device())
        return box[0]

    def all_gather_objects(self, obj: Any) -> list[Any]:
        if self.world_size == 1:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def all_reduce_(self, tensor, op: str = "sum"):
        """In-place SUM or MAX over ranks; the tensor may live anywhere (it travels through the group's device)."""
        if self.world_size == 1:
            return tensor
        import torch.distributed as dist

        target = self._object_device()
        moved = tensor if target is None or tensor.device == target else tensor.to(target)
        dist.all_reduce(moved, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        if moved is not tensor:
            tensor.copy_(moved)
        return tensor

    def barrier(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        import torch.distributed as dist

        if self.world_size == 1 and dist.is_initialized():  # a group of one (cpu_offload): nobody to wait for
            dist.destroy_process_group()
        elif self.world_size > 1:
            if dist.is_initialized():
                # Every rank reaches this point before any tears the group down: a rank that destroys it while
                # a peer still has a collective or a connection in flight aborts that peer (seen under load).
                try:
                    dist.barrier()
                finally:
                    dist.destroy_process_group()

    def _object_device(self):
        return self.device if self.backend == "nccl" else None


def init_distributed(device: str = "auto", *, timeout_s: float = 1800.0, gpus: list[int] = (), cpu_offload: bool = False) -> Distributed:
    """Join the process group that torchrun describes in the environment (RANK, WORLD_SIZE, LOCAL_RANK).

    Started without torchrun (no WORLD_SIZE), this is rank 0 of 1 and creates no process group. `timeout_s`
    bounds every collective: a peer that stops answering fails the learner instead of hanging it. `gpus`
    (`learner.gpus`): the node's GPUs the learner trains on, rank r on gpus[r]; empty: 0 .. world_size - 1.
    `cpu_offload`: FSDP2 even for one process, which then joins a process group of one (an in-process store).
    """
    import torch

    select_and_check_gpus(gpus, "learner.gpus")
    device_type = resolve_device(device)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    info = Distributed(rank=rank, world_size=world_size, local_rank=local_rank, device_type=device_type)
    if device_type == "cuda":
        torch.cuda.set_device(info.device)
    if world_size > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group(
                backend=info.backend,
                timeout=timedelta(seconds=timeout_s),
                device_id=info.device if device_type == "cuda" else None,
            )
    elif cpu_offload:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group(backend=info.backend, store=dist.HashStore(), rank=0, world_size=1,
                                    timeout=timedelta(seconds=timeout_s))
    return info


def shard_model(model, dist: Distributed, *, frozen: bool = False, compute_dtype=None, cpu_offload: bool = False):
    """FSDP2 over the group: each decoder layer (the model's `_no_split_modules`) is one unit, the root the last.

    Gradients are summed, not averaged, over ranks. For one process the model is only moved to the device, unless
    a process group of one was made by hand (bin/device_check.py runs FSDP2 on one GPU that way). `compute_dtype`
    (torch.bfloat16 when model.dtype is bfloat16, learner/precision.py): the shards stay in their dtype (fp32 master
    weights), each unit is gathered in `compute_dtype` for its forward and backward, gradients are summed in fp32.
    `cpu_offload`: the shards, their gradients and so AdamW's state stay in host RAM (see the module's doc); one
    process needs the group of one that `init_distributed(..., cpu_offload=True)` makes.
    """
    import torch.distributed

    if dist.world_size == 1 and not torch.distributed.is_initialized():
        if cpu_offload:
            raise ValueError("learner.cpu_offload runs the learner under FSDP2, which needs a process group: start it with "
                             "learner.distributed.init_distributed(..., cpu_offload=True) (learner/train.py does)")
        return model.to(dist.device)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(dist.device_type, (dist.world_size,))
    layer_classes = set(getattr(model, "_no_split_modules", None) or ())
    if not layer_classes:
        raise ValueError(f"{type(model).__name__} names no _no_split_modules: cannot tell its decoder layers to shard")
    full = model.state_dict() if dist.is_main else {}  # rank 0's weights (load_model), sent to the others below
    options = {"mesh": mesh}
    if compute_dtype is not None:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    if cpu_offload:  # pinned host memory (faster copies) where there is a GPU to copy to
        options["offload_policy"] = CPUOffloadPolicy(pin_memory=dist.device_type == "cuda")
    for module in model.modules():
        if type(module).__name__ in layer_classes:
            fully_shard(module, **options)
    fully_shard(model, **options)
    _receive_from_rank0(model, full, dist, cpu_offload=cpu_offload)
    if not frozen:
        for module in model.modules():
            if isinstance(module, FSDPModule):
                # Sum over ranks, as plain SUM collectives (gloo has no pre-multiplied sum).
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)
    return model


def load_model(model_path: str, dist: Distributed, *, dtype):
    """The model of `model_path` in `dtype`: read from disk by rank 0 only; on the other ranks built from its config
    on the meta device (no memory), to be filled by `shard_model`, which sends each rank its shards of rank 0's
    weights. One process reads it as usual. So a node holds one copy in host memory, not one per rank."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if dist.world_size == 1 or dist.is_main:
        return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    import torch

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path), dtype=dtype)


def _receive_from_rank0(model, full: dict, dist: Distributed, *, cpu_offload: bool = False) -> None:
    """After fully_shard: every rank's shards of rank 0's `full` state dict (torch.distributed.checkpoint's
    broadcast_from_rank0), and rank 0's buffers (rotary tables, not in any state dict when non-persistent), so
    ranks that built the model on the meta device (`load_model`) hold the same model as rank 0. Offloaded, the
    shards are made in host RAM and the buffers on the GPU, where FSDP2 keeps them."""
    import torch
    import torch.distributed
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    on_meta = any(t.is_meta for t in list(model.parameters()) + list(model.buffers()))
    if not any(dist.all_gather_objects(on_meta)):
        return  # every rank read the weights itself
    if on_meta:
        model.to_empty(device="cpu" if cpu_offload else dist.device)
        if cpu_offload:
            for module in model.modules():
                for name, buffer in module.named_buffers(recurse=False):
                    module._buffers[name] = buffer.to(dist.device)
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    for buffer in model.buffers():
        torch.distributed.broadcast(buffer.data, src=0)


def split_by_tokens(lengths: list[int], world_size: int) -> list[list[int]]:
    """Indices into `lengths`, one list per rank, balancing token counts: longest first to the lightest rank.

    Deterministic (ties go to the lower index and the lower rank), so every rank computes every rank's share.
    """
    shares: list[list[int]] = [[] for _ in range(world_size)]
    loads = [0] * world_size
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        shares[rank].append(index)
        loads[rank] += lengths[index]
    return [sorted(share) for share in shares]


def select_and_check_gpus(gpus, field: str) -> None:
    """Make only `gpus` visible to this process (engine/protocol/devices.py, before CUDA starts), then check that
    each is there. Empty: leave the environment as it is. On a machine without GPUs nothing is checked (the
    learner runs on the CPU)."""
    if not gpus:
        return
    import torch

    select_gpus(gpus, field)
    visible = torch.cuda.device_count()
    if 0 < visible < len(gpus):
        raise ValueError(f"{field} = {list(gpus)} names a GPU this node does not have: use indices below the node's GPU count")


def refuse_oversize(indices: list[int], lengths: list[int], max_tokens: int) -> list[int]:
    """`indices` without the samples longer than `max_tokens` (`learner.micro_batch_tokens`), each refused with a
    message: one sample must fit one micro-batch, or the micro-batch's memory bound would not hold."""
    kept = [i for i in indices if lengths[i] <= max_tokens]
    for i in indices:
        if lengths[i] > max_tokens:
            print(
                f"learner: a sample of {lengths[i]} tokens is longer than learner.micro_batch_tokens = {max_tokens} and is "
                f"not trained on: raise learner.micro_batch_tokens to at least {lengths[i]} (or lower play.max_context_tokens)",
                file=sys.stderr, flush=True,
            )
    return kept
