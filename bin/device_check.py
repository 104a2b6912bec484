"""Device check: the GPU paths on one GPU with a random model of realistic size, in one command, one JSON line.

    python bin/device_check.py              # on a GPU machine with torch + transformers (no vLLM, no download)
    python bin/device_check.py --dry-run    # the same steps on tiny sizes on the CPU (tests/test_device_check.py)

Builds a random Qwen3-0.6B-shaped model on the spot (hidden 1024, 28 layers, 16 heads / 8 KV heads, vocab
151,936, tied embeddings; the tests' tokenizer, so nothing is downloaded; no weights travel), then measures:
  1. the transformers backend (actors/inference/hf.py, bf16 weights on the GPU): generation tokens/s at several
     batch sizes (prompt 256 tokens, 128 new tokens, T = 1);
  2. the learner (learner/trainer.py, fp32 master weights, bf16 autocast, chunked log-probs): training tokens/s
     of `Trainer.update` and its MFU, 6 N + 12 L H S FLOPs a token against the GPU's dense bf16 peak;
  3. the log-prob gap in bf16: what the backend recorded while sampling against the learner's recomputation of
     the same tokens (mean and max |difference|, the mean k3 mismatch; the gap in fp32 for comparison);
  4. the learner under FSDP2 on one GPU (a one-process NCCL group, so `shard_model` shards): tokens/s, and that
     its update equals the plain one (loss and gradient norm).
Sized to finish in a few minutes on one H200. Ends with {"check": "device", ...}.
"""

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

PEAK_BF16_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L40S": 362.0, "A10": 125.0}  # dense
QWEN3_06B = dict(hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, intermediate=3072, vocab=151936)
TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=4096)


def build_model(folder: Path, shape: dict, dtype) -> Path:
    """A random Qwen3 of `shape` with the tests' tokenizer (learner/tiny_model.py), saved as a model folder."""
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from learner.tiny_model import build_tiny_model

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(folder / "tokenizer-source"))
    config = Qwen3Config(
        vocab_size=shape["vocab"], hidden_size=shape["hidden"], intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"],
        head_dim=shape["head_dim"], tie_word_embeddings=True, max_position_embeddings=8192,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen3ForCausalLM(config).to(dtype)
    target = folder / "model"
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def measure_generation(backend, batch_sizes, prompt_len, new_tokens, vocab) -> dict:
    from actors.inference.base import GenerationRequest

    rng = np.random.default_rng(0)
    out = {}
    for size in batch_sizes:
        requests = [GenerationRequest(prompt_ids=rng.integers(5, vocab, prompt_len).tolist(), max_new_tokens=new_tokens, temperature=1.0) for _ in range(size)]
        backend.generate(requests[:1])  # warm-up at this size's shapes is not needed beyond one call
        _sync()
        started = time.perf_counter()
        generations = backend.generate(requests)
        _sync()
        seconds = time.perf_counter() - started
        out[str(size)] = round(sum(len(g.completion_ids) for g in generations) / seconds, 1)
        print(f"generation batch {size}: {out[str(size)]} tokens/s", flush=True)
    return out


def make_samples(rows: int, length: int, vocab: int, seed: int = 0):
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
    trainer.update(samples)  # warm-up
    times, metrics = [], {}
    for _ in range(rounds):
        _sync()
        started = time.perf_counter()
        metrics = trainer.update(samples)
        _sync()
        times.append(time.perf_counter() - started)
    from engine.protocol.messages import unpack_ints

    tokens = sum(len(unpack_ints(s.tokens)) for s in samples)
    return tokens / statistics.mean(times), metrics


def logprob_gap(backend, trainer, vocab, rows: int, prompt_len: int, new_tokens: int) -> dict:
    """The backend's recorded log-probs (bf16 weights) against the learner's recomputation (its own path)."""
    from actors.inference.base import GenerationRequest
    from learner.logprobs import sequence_logprobs

    rng = np.random.default_rng(1)
    prompts = [rng.integers(5, vocab, prompt_len).tolist() for _ in range(rows)]
    generations = backend.generate([GenerationRequest(prompt_ids=p, max_new_tokens=new_tokens, temperature=1.0) for p in prompts])
    gaps, k3s, gaps32 = [], [], []
    for prompt, g in zip(prompts, generations):
        ids = torch.tensor([prompt + g.completion_ids], device=trainer.device)
        with torch.no_grad():
            learner = sequence_logprobs(trainer.model, ids, torch.ones_like(ids), None, autocast=trainer.autocast)[0, len(prompt) :]
            fp32 = sequence_logprobs(trainer.model, ids, torch.ones_like(ids), None, autocast=False)[0, len(prompt) :]
        recorded = torch.tensor(g.logprobs, device=learner.device)
        diff = learner.float() - recorded
        gaps.append(diff.abs())
        gaps32.append((fp32.float() - recorded).abs())
        k3s.append(torch.exp(-diff) + diff - 1)  # log rho = learner - behaviour
    gap, gap32, k3 = torch.cat(gaps), torch.cat(gaps32), torch.cat(k3s)
    return {"mean_abs": float(gap.mean()), "max_abs": float(gap.max()), "k3": float(k3.mean()), "fp32_learner_mean_abs": float(gap32.mean())}


def open_single_process_group(device_type: str, scratch: Path) -> None:
    import torch.distributed as dist

    backend = "nccl" if device_type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{scratch / 'pg'}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0) if device_type == "cuda" else None)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU: checks that every step runs")
    args = parser.parse_args(argv)
    from actors.inference.hf import TransformersBackend
    from engine.protocol.config import LearnerConfig
    from learner.distributed import Distributed
    from learner.trainer import Trainer

    started = time.perf_counter()
    dry = args.dry_run
    cuda = torch.cuda.is_available() and not dry
    if not cuda and not dry:
        print("error: no GPU visible (use --dry-run for the CPU check)", file=sys.stderr)
        return 2
    shape = TINY if dry else QWEN3_06B
    device = "cuda" if cuda else "cpu"
    batch_sizes, prompt_len, new_tokens = ([1, 2], 16, 8) if dry else ([1, 8, 32, 64], 256, 128)
    rows, length, rounds = (4, 64, 1) if dry else (16, 1024, 3)
    result: dict = {"check": "device", "dry_run": dry, "device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        path = str(build_model(scratch, shape, torch.bfloat16 if cuda else torch.float32))

        backend = TransformersBackend(path, dtype="bfloat16" if cuda else "float32", seed=0)
        backend.model.to(device)
        n_params = sum(p.numel() for p in backend.model.parameters())
        result["parameters"] = n_params
        result["generation_tokens_per_s"] = measure_generation(backend, batch_sizes, prompt_len, new_tokens, shape["vocab"])

        config = LearnerConfig(learning_rate=1e-6, micro_batch_tokens=max(length * 8, 2048), device=device)
        trainer = Trainer(path, config)
        samples = make_samples(rows, length, shape["vocab"])
        tokens_per_s, metrics = measure_training(trainer, samples, rounds)
        flops_per_token = 6 * n_params + 12 * shape["layers"] * shape["hidden"] * length
        peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in result["device"]), None)
        result["train_tokens_per_s"] = round(tokens_per_s, 1)
        result["train_autocast_bf16"] = trainer.autocast
        result["mfu"] = round(tokens_per_s * flops_per_token / (peak * 1e12), 4) if peak and cuda else None
        result["peak_tflops_bf16"] = peak
        if cuda:
            result["train_peak_memory_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        print(f"training: {tokens_per_s:.0f} tokens/s, MFU {result['mfu']}", flush=True)
        result["logprob_gap"] = logprob_gap(backend, trainer, shape["vocab"], rows=4, prompt_len=prompt_len, new_tokens=new_tokens)
        print(f"log-prob gap: {result['logprob_gap']}", flush=True)
        plain = Trainer(path, config).update(samples)
        del trainer, backend
        if cuda:
            torch.cuda.empty_cache()

        open_single_process_group(device, scratch)
        try:
            sharded = Trainer(path, config, distributed=Distributed(device_type=device))
            from torch.distributed.fsdp import FSDPModule

            assert isinstance(sharded.model, FSDPModule), "the learner's model was not sharded"
            first = sharded.update(samples)
            fsdp_tokens_per_s, _ = measure_training(sharded, samples, rounds)
        finally:
            torch.distributed.destroy_process_group()
        result["fsdp2_tokens_per_s"] = round(fsdp_tokens_per_s, 1)
        result["fsdp2_loss_gap"] = abs(first["loss"] - plain["loss"])
        result["fsdp2_grad_norm_ratio"] = first["grad_norm"] / plain["grad_norm"] if plain["grad_norm"] else None
        result["fsdp2_matches_plain"] = bool(result["fsdp2_loss_gap"] < 1e-3 and math.isclose(first["grad_norm"], plain["grad_norm"], rel_tol=2e-2))
    result["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
