"""Where a run's processes go on a GPU node, and what memory each is expected to take: the placement plan that
`up` prints, writes to run.json (`placement`) and starts the learner and the rollout workers from. No torch here:
it runs before any process touches CUDA.

    plan = plan_placement(config, model_path)              # the node's GPUs (nvidia-smi), or gpus=8, gpu_memory_gib=80
    apply_plan(config, plan)                               # learner.gpus / world_size and worker.count, into config.toml
    print(format_plan(plan))
    env = worker_env(plan, "w0")                           # the worker child's environment: its GPUs, share, sleep mode
    placed = apply_worker_placement(config)                # in the worker: config.inference.* from that environment

Two layouts (`inference.placement`):
- split: generation on some GPUs, training on the rest. The generation GPUs are cut into groups of
  `inference.tensor_parallel` GPUs, one rollout worker (one vLLM engine, tensor-parallel over its group) per group:
  data-parallel generation. Generation and training run at once (the asynchronous engine's layout).
- time-shared: generation and training on the same GPUs, taking turns (the reference's colocated, synchronous
  runs): before the learner updates, every worker's engine sleeps (vLLM sleep level 1: weights to host RAM, KV
  cache dropped); once the new version is published they wake and load it before the next rollouts
  (engine/peers/time_share.py). Each engine's memory share leaves room for the learner's state that stays on the
  GPU between updates.
auto: no GPU: the CPU as before ("cpu"); one GPU, or `run.max_staleness = 0` (nothing to overlap): time-shared;
otherwise split.

Counts: `worker.count` 1 (the default) means one worker per GPU group of the generation share, above 1 exactly that
many (more than there are groups would stack engines on the same GPUs: refused). `learner.world_size` 1 (the
default) with `learner.gpus` empty and full fine-tuning means the learner's whole share (time-shared: every GPU;
split: the upper half), above 1 exactly that many. Explicit `inference.gpus` / `learner.gpus` are indices into the
GPUs the node shows (CUDA_VISIBLE_DEVICES order) and win over the defaults.

Memory (GiB, estimates; "est." in the plan): vLLM serves bf16 weights (2 bytes a parameter, from config.json's
shapes), a fixed overhead (CUDA graphs, activations at its start-up profile), and the rest of its share as KV cache.
The learner's figure: `up` measures it (learner/memory_plan.py, in a child process) and plans with it; elsewhere
`learner_memory` (engine/protocol/node_memory.py: the GPUs, model shapes and these figures), a simple estimate.
A plan whose expected memory exceeds a GPU's is refused in one line naming the fix.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import msgspec

from engine.protocol.node_memory import (
    DEFAULT_GPU_MEMORY_GIB,
    GIB,
    SERVING_BYTES,
    LearnerMemory,
    ModelShape,
    PlacementError,
    learner_memory,
    model_shape,
    visible_gpus,
)

Layout = Literal["cpu", "split", "time-shared"]
PLACEMENTS = ("auto", "split", "time-shared")

WORKER_PLACEMENT_ENV = "SPADE_WORKER_PLACEMENT"  # a worker child's WorkerPlacement as JSON (set by `up`)

USABLE_SHARE = 0.95  # of a GPU's memory a plan fills: the rest for CUDA contexts and fragmentation (est.)
VLLM_OVERHEAD_GIB = 2.0  # vLLM beside weights and KV cache: CUDA graphs, the profile's activations (est.)
VLLM_ASLEEP_GIB = 1.0  # a sleeping engine (level 1): its CUDA context and what it does not release (est.)


class ProcessPlan(msgspec.Struct, frozen=True, kw_only=True):
    name: str  # "learner" or "worker-<id>" (the child's name, engine/peers/processes.py)
    role: Literal["learner", "generation"]
    gpus: list[int]  # indices into the GPUs the node shows; empty: the CPU
    memory_gib: float  # expected peak on each of its GPUs (0: on the CPU, or not known)
    detail: str  # what the figure is made of
    worker_id: str = ""  # generation: the worker's id
    tensor_parallel: int = 0  # generation: GPUs of its vLLM engine
    gpu_memory_utilization: float = 0.0  # generation: vLLM's share of each GPU
    sleeps: bool = False  # generation: put to sleep while the learner updates (time-shared)


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    layout: Layout
    gpus: int  # GPUs the node shows
    gpu_memory_gib: float  # each
    why: str  # why this layout
    processes: list[ProcessPlan]
    start_order: str
    notes: list[str] = []

    @property
    def workers(self) -> list[ProcessPlan]:
        return [p for p in self.processes if p.role == "generation"]

    @property
    def learner(self) -> ProcessPlan | None:
        return next((p for p in self.processes if p.role == "learner"), None)

    @property
    def time_shared(self) -> bool:
        return self.layout == "time-shared" and any(p.sleeps for p in self.workers)


class WorkerPlacement(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What `up` tells one worker child in its environment (WORKER_PLACEMENT_ENV)."""

    gpus: list[int]
    gpu_memory_utilization: float
    sleep_mode: bool


def _gpu_backend(config) -> str:
    """The backend that puts the model on a worker's GPUs: "vllm" (named, or "auto", which on a GPU machine is vLLM
    or refused: actors/inference/factory.py), "transformers" (one GPU, no tensor parallelism, unless inference.device
    is "cpu"), or "" (scripted, timed, or transformers on the CPU: the worker's GPUs hold nothing)."""
    kind = config.inference.backend
    if kind in ("vllm", "auto"):
        return "vllm"
    if kind == "transformers" and config.inference.device != "cpu":
        return "transformers"
    return ""


# ---------------------------------------------------------------- the plan
def plan_placement(config, model_path: str | Path | None = None, *, gpus: int | None = None, gpu_memory_gib: float | None = None,
                   learner_mem: LearnerMemory | None = None, check_learner: bool = True) -> Plan:
    """The placement of `config`'s processes on this node (or on `gpus` GPUs of `gpu_memory_gib` each); raises
    PlacementError, one line naming the fix, for a placement that cannot work. `learner_mem`: the learner's measured
    figure (`measured_learner_memory`) instead of the estimate; `check_learner` False: the learner's fit is left to
    that measured plan (`up` plans twice: first for the learner's GPUs, then with the measured figure)."""
    if gpus is None:
        gpus, detected = visible_gpus()
        gpu_memory_gib = gpu_memory_gib or detected
    gpu_memory_gib = gpu_memory_gib or DEFAULT_GPU_MEMORY_GIB
    inf, lrn, count = config.inference, config.learner, config.worker.count
    if gpus <= 0:
        return _cpu_plan(config)
    for name, listed in (("inference.gpus", inf.gpus), ("learner.gpus", lrn.gpus)):
        if listed and max(listed) >= gpus:
            raise PlacementError(f"{name} = {list(listed)} names a GPU this node does not show (it shows {gpus}): use indices below {gpus}")
    layout, why = _layout(config, gpus)
    learner_gpus = _learner_gpus(config, layout, gpus)
    generation = [] if count == 0 else list(inf.gpus) or (
        [g for g in range(gpus) if g not in learner_gpus] if layout == "split" else list(range(gpus)))
    if layout == "split":
        shared = sorted(set(generation) & set(learner_gpus))
        if shared:
            raise PlacementError(f"inference.gpus and learner.gpus share GPU {shared} in the split layout: give generation and "
                                 "training different GPUs, or set inference.placement = \"time-shared\" to share them")
        if count and not generation:
            raise PlacementError(f"the split layout leaves no GPU for generation: the learner takes all {gpus} (learner.world_size = "
                                 f"{len(learner_gpus)}); lower learner.world_size, or set inference.placement = \"time-shared\"")
    shape = model_shape(model_path)
    on_gpu = _gpu_backend(config)
    tp = _tensor_parallel(config, shape, gpu_memory_gib, len(generation)) if generation else 0
    notes: list[str] = []
    groups = [generation[i : i + tp] for i in range(0, len(generation) - tp + 1, tp)] if tp else []
    if count:
        if not groups:
            raise PlacementError(f"inference.tensor_parallel = {tp} needs {tp} GPUs per engine but generation has {len(generation)} "
                                 f"({_span(generation)}): lower inference.tensor_parallel, or give generation more GPUs")
        engines = len(groups) if count == 1 else count
        if engines > len(groups):
            raise PlacementError(
                f"worker.count = {count} engines of inference.tensor_parallel = {tp} GPUs would stack on the {len(generation)} "
                f"generation GPUs ({_span(generation)}), which hold {len(groups)}: set worker.count to at most {len(groups)} "
                "(or 1: one engine per GPU group), or lower inference.tensor_parallel")
        if engines < len(groups) or len(generation) % tp:
            idle = len(generation) - engines * tp
            notes.append(f"{idle} generation GPU(s) idle: worker.count = 1 starts one engine per group of inference.tensor_parallel GPUs")
        groups = groups[:engines]
    if learner_mem is None:
        learner_mem = learner_memory(shape, config, max(1, len(learner_gpus))) if shape and learner_gpus else None
    usable = gpu_memory_gib * USABLE_SHARE
    processes = []
    for i, group in enumerate(groups):
        sleeps = layout == "time-shared" and bool(set(group) & set(learner_gpus))
        util = inf.gpu_memory_utilization
        if sleeps and learner_mem is not None and on_gpu:
            util = min(util, (usable - learner_mem.resident_gib) / gpu_memory_gib)
        processes.append(_engine_plan(config, f"w{i}", group, util, sleeps, shape, on_gpu, gpu_memory_gib, learner_mem))
    for engine in processes:  # an awake engine beside the learner's state between updates (vLLM's share is sized for it)
        if engine.sleeps and learner_mem is not None and engine.memory_gib + learner_mem.resident_gib > usable:
            raise PlacementError(
                f"{engine.name} ({engine.memory_gib:.1f} GiB) and the learner's state between updates ({learner_mem.resident_gib:.1f} GiB) "
                f"do not fit on GPU {_span(engine.gpus)} ({usable:.1f} GiB usable): raise learner.world_size, or use inference.placement = \"split\"")
    if learner_gpus:
        processes.append(_learner_plan(config, learner_gpus, learner_mem, usable, gpu_memory_gib, processes, check=check_learner))
    else:
        processes.append(ProcessPlan(name="learner", role="learner", gpus=[], memory_gib=0.0, detail="on the CPU (learner.device = \"cpu\")"))
    if not on_gpu and count:
        notes.append(f"inference.backend = {inf.backend!r} generates on the CPU: the workers' GPUs hold nothing")
    if shape is None:
        notes.append("the model's config.json gives no shapes: memory not estimated, and the plan's fit not checked")
    start = ("the workers start first and size their KV caches alone, then sleep; the learner loads; the workers wake "
             "for the first rollouts" if any(p.sleeps for p in processes) else "the learner and the workers start together")
    return Plan(layout=layout, gpus=gpus, gpu_memory_gib=round(gpu_memory_gib, 1), why=why, processes=processes, start_order=start, notes=notes)


def _cpu_plan(config) -> Plan:
    workers = [ProcessPlan(name=f"worker-w{i}", role="generation", gpus=[], memory_gib=0.0, detail="on the CPU", worker_id=f"w{i}")
               for i in range(config.worker.count)]
    learner = ProcessPlan(name="learner", role="learner", gpus=[], memory_gib=0.0, detail=f"on the CPU, {config.learner.world_size} process(es)")
    return Plan(layout="cpu", gpus=0, gpu_memory_gib=0.0, why="no GPU: everything on the CPU (engine/protocol/devices.py shares the cores)",
                processes=[*workers, learner], start_order="the learner and the workers start together")


def _layout(config, gpus: int) -> tuple[Layout, str]:
    chosen, staleness = config.inference.placement, config.run.max_staleness
    if chosen == "split":
        if gpus < 2:
            raise PlacementError("inference.placement = \"split\" needs at least 2 GPUs and this node shows 1: set inference.placement = \"time-shared\" (or auto)")
        return "split", "inference.placement = \"split\""
    if chosen == "time-shared":
        return "time-shared", "inference.placement = \"time-shared\""
    if gpus == 1:
        return "time-shared", "one GPU: generation and training take turns on it (inference.placement = auto)"
    if staleness == 0:
        return "time-shared", "run.max_staleness = 0 (synchronous): generation and training take turns on every GPU, the reference's layout (auto)"
    return "split", f"run.max_staleness = {staleness} (asynchronous): generation and training run at once on their own GPUs (auto)"


def _learner_gpus(config, layout: Layout, gpus: int) -> list[int]:
    lrn = config.learner
    if lrn.device == "cpu":
        return []
    if lrn.gpus:
        return list(lrn.gpus)
    fill = lrn.world_size == 1 and lrn.lora_rank == 0
    if lrn.world_size > gpus:
        raise PlacementError(f"learner.world_size = {lrn.world_size} needs {lrn.world_size} GPUs and this node shows {gpus}: lower learner.world_size")
    if layout == "time-shared":
        pool = list(config.inference.gpus) or list(range(gpus))
        return pool if fill else pool[: lrn.world_size] if len(pool) >= lrn.world_size else list(range(lrn.world_size))
    if config.worker.count == 0:
        return list(range(gpus)) if fill else list(range(lrn.world_size))
    free = [g for g in range(gpus) if g not in config.inference.gpus] if config.inference.gpus else list(range(gpus))
    want = max(1, gpus // 2) if fill and not config.inference.gpus else len(free) if fill else lrn.world_size
    return free[-want:] if want <= len(free) else free


def _tensor_parallel(config, shape: ModelShape | None, gpu_memory_gib: float, available: int) -> int:
    """inference.tensor_parallel, or (0) the fewest GPUs, a power of two, whose share of the bf16 weights takes at
    most half of vLLM's share of a GPU."""
    if _gpu_backend(config) == "transformers":
        if config.inference.tensor_parallel > 1:
            raise PlacementError(f"inference.tensor_parallel = {config.inference.tensor_parallel}: the transformers backend runs "
                                 "on one GPU; set inference.tensor_parallel = 1, or inference.backend = \"vllm\"")
        return 1
    if config.inference.tensor_parallel:
        return config.inference.tensor_parallel
    tp = 1
    if shape is not None:
        budget = config.inference.gpu_memory_utilization * gpu_memory_gib
        while tp * 2 <= max(1, available) and shape.parameters * SERVING_BYTES / tp / GIB > budget / 2:
            tp *= 2
    return tp


def _engine_plan(config, worker_id: str, group: list[int], util: float, sleeps: bool, shape: ModelShape | None, on_gpu: str,
                 gpu_memory_gib: float, learner_mem: LearnerMemory | None) -> ProcessPlan:
    name = f"worker-{worker_id}"
    base = dict(name=name, role="generation", gpus=group, worker_id=worker_id, tensor_parallel=len(group), sleeps=sleeps)
    if not on_gpu:
        return ProcessPlan(**base, memory_gib=0.0, detail=f"backend {config.inference.backend}: on the CPU", gpu_memory_utilization=round(util, 3))
    if on_gpu == "transformers":
        return _transformers_plan(config, base, shape, sleeps)
    budget = util * gpu_memory_gib
    if shape is None:
        return ProcessPlan(**base, memory_gib=round(budget, 1), detail=f"vLLM, {util:.0%} of each GPU (shapes unknown)", gpu_memory_utilization=round(util, 3))
    weights = shape.parameters * SERVING_BYTES / len(group) / GIB
    kv = config.inference.kv_cache_gb or budget - weights - VLLM_OVERHEAD_GIB
    tokens = int(kv * GIB / (shape.kv_bytes_per_token / len(group))) if kv > 0 else 0
    context = config.inference.max_model_len or config.play.max_context_tokens
    where = f"GPU {_span(group)}"
    if weights + VLLM_OVERHEAD_GIB + max(kv, 0) > budget + 1e-9 or tokens < context:
        room = "the learner's state leaves it" if sleeps and learner_mem is not None and util < config.inference.gpu_memory_utilization else "inference.gpu_memory_utilization gives it"
        raise PlacementError(
            f"vLLM on {where} does not fit: bf16 weights {weights:.1f} GiB + overhead {VLLM_OVERHEAD_GIB:.0f} GiB (est.) leave "
            f"{max(kv, 0):.1f} GiB of KV cache ({tokens} tokens) in the {budget:.1f} GiB {room}, less than one context of "
            f"{context} tokens: raise inference.tensor_parallel, or learner.world_size (time-shared), or lower play.max_context_tokens")
    asleep = f"; asleep ~{VLLM_ASLEEP_GIB:.0f} GiB while the learner updates" if sleeps else ""
    detail = (f"vLLM tp {len(group)}: weights {weights:.1f} + KV cache {kv:.1f} (~{_tokens(tokens)} tokens) + overhead "
              f"{VLLM_OVERHEAD_GIB:.0f} = {util:.0%} of the GPU{asleep}")
    return ProcessPlan(**base, memory_gib=round(budget, 1), detail=detail, gpu_memory_utilization=round(util, 3))


def _transformers_plan(config, base: dict, shape: ModelShape | None, sleeps: bool) -> ProcessPlan:
    """The transformers backend on one GPU: its weights in model.dtype and a full batch's KV cache; no share reserved."""
    if shape is None:
        return ProcessPlan(**base, memory_gib=0.0, detail="transformers on one GPU (shapes unknown)")
    size = 2 if config.model.dtype == "bfloat16" else 4
    weights = shape.parameters * size / GIB
    kv = config.inference.max_batch * config.play.max_context_tokens * shape.kv_bytes_per_token * size / SERVING_BYTES / GIB
    asleep = "; on the CPU while the learner updates" if sleeps else ""
    detail = f"transformers: weights {weights:.1f} ({config.model.dtype}) + KV cache {kv:.1f} for inference.max_batch contexts + overhead 1{asleep}"
    return ProcessPlan(**base, memory_gib=round(weights + kv + 1.0, 1), detail=detail)


def _learner_plan(config, gpus: list[int], mem: LearnerMemory | None, usable: float, gpu_memory_gib: float,
                  engines: list[ProcessPlan], check: bool = True) -> ProcessPlan:
    world = f"world size {len(gpus)}"
    if mem is None:
        return ProcessPlan(name="learner", role="learner", gpus=gpus, memory_gib=0.0, detail=f"{world} (shapes unknown)")
    # What shares the learner's GPUs while it updates: awake engines (split: none share; explicit lists may), or
    # sleeping ones (time-shared).
    beside = max((VLLM_ASLEEP_GIB if e.sleeps else e.memory_gib for e in engines if set(e.gpus) & set(gpus)), default=0.0)
    if check and mem.peak_gib + beside > usable:
        raise PlacementError(
            f"the learner needs about {mem.peak_gib:.1f} GiB on each of its {len(gpus)} GPU(s) during an update ({mem.detail}; est.)"
            f"{f' beside {beside:.1f} GiB of vLLM' if beside else ''}, more than the {usable:.1f} GiB usable of a "
            f"{gpu_memory_gib:.0f} GiB GPU: raise learner.world_size, " + ("or lower learner.micro_batch_tokens" if getattr(
                config.learner, "activation_checkpointing", False) else "lower learner.micro_batch_tokens, or checkpoint activations "
                "(learner.activation_checkpointing = true)"))
    detail = f"{world}, up to {mem.peak_gib:.1f} GiB a GPU during an update ({mem.detail}), {mem.resident_gib:.1f} resident between"
    return ProcessPlan(name="learner", role="learner", gpus=gpus, memory_gib=round(mem.peak_gib, 1), detail=detail)


def _span(gpus: list[int]) -> str:
    if not gpus:
        return "none"
    if len(gpus) > 1 and gpus == list(range(gpus[0], gpus[-1] + 1)):
        return f"{gpus[0]}-{gpus[-1]}"
    return ",".join(map(str, gpus))


def _tokens(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e3 else str(n)


# ---------------------------------------------------------------- using the plan
def apply_plan(config, plan: Plan) -> None:
    """The plan into the config the processes read (config.toml): its layout, the learner's GPUs and world size, and
    the number of workers `up` starts. On the CPU nothing changes."""
    if plan.layout == "cpu":
        return
    config.inference.placement = plan.layout  # resolved, so that --resume keeps it (time-shared lists may overlap)
    learner = plan.learner
    if learner is not None and learner.gpus:
        config.learner.gpus = list(learner.gpus)
        config.learner.world_size = len(learner.gpus)
    if config.worker.count:
        config.worker.count = len(plan.workers)


def format_plan(plan: Plan) -> str:
    """The plan as `up` prints it."""
    if plan.layout == "cpu":
        return f"placement: cpu ({plan.why})"
    lines = [f"placement: {plan.layout} on {plan.gpus} GPU(s) of {plan.gpu_memory_gib:g} GiB: {plan.why}"]
    for p in plan.processes:
        where = f"GPU {_span(p.gpus)}" if p.gpus else "CPU"
        figure = f"{p.memory_gib:5.1f} GiB" if p.memory_gib else "    - GiB"
        lines.append(f"  {p.name:<11} {where:<10} {figure}  {p.detail}")
    lines.append(f"  start order: {plan.start_order}")
    lines += [f"  note: {note}" for note in plan.notes]
    return "\n".join(lines)


def plan_record(plan: Plan) -> dict:
    """The plan as run.json holds it (`placement`)."""
    return msgspec.to_builtins(plan)


def read_plan(record) -> Plan | None:
    """The plan run.json holds (`placement`), or None (none recorded: a run started before plans, or a test)."""
    if not record:
        return None
    try:
        return msgspec.convert(record, Plan)
    except msgspec.ValidationError:
        return None


def worker_env(plan: Plan | None, worker_id: str) -> dict[str, str]:
    """The environment `up` gives worker `worker_id`'s process: its GPUs, vLLM share and sleep mode; {} on the CPU."""
    if plan is None or plan.layout == "cpu":
        return {}
    for p in plan.workers:
        if p.worker_id == worker_id:
            placed = WorkerPlacement(gpus=p.gpus, gpu_memory_utilization=p.gpu_memory_utilization, sleep_mode=p.sleeps)
            return {WORKER_PLACEMENT_ENV: msgspec.json.encode(placed).decode()}
    return {}


def apply_worker_placement(config, env=None) -> WorkerPlacement | None:
    """In a worker `up` started from a plan: its GPUs (`inference.gpus`, one engine tensor-parallel over them) and its
    vLLM share into `config`; None for a worker without one (attached by hand, or on the CPU)."""
    env = os.environ if env is None else env
    text = env.get(WORKER_PLACEMENT_ENV, "")
    if not text:
        return None
    try:
        placed = msgspec.json.decode(text, type=WorkerPlacement)
    except msgspec.DecodeError as exc:
        raise PlacementError(f"{WORKER_PLACEMENT_ENV} does not hold a worker placement ({exc}): start workers with `up`, or unset it") from None
    if any(g < 0 for g in placed.gpus) or not 0.0 < placed.gpu_memory_utilization <= 1.0:
        raise PlacementError(f"{WORKER_PLACEMENT_ENV} holds an impossible placement ({text}): start workers with `up`, or unset it")
    config.inference.gpus = list(placed.gpus)
    config.inference.gpu_memory_utilization = placed.gpu_memory_utilization
    return placed
