"""Inference benchmark: vLLM against the transformers backend, generation tokens/s on the same agent workload.

    bin/bench inference [--model smollm2|tiny|DIR --envs 4 --episodes 4 --turns 3 --tokens 32 --eager]

Runs from .venv-vllm (both backends are there; made by `bin/test --vllm`, and by this script if missing: it
re-executes itself there). The model: the embedded SmolLM2-135M-Instruct (default; converted once), the
tests' tiny random model, or a folder. The workload is what `up` asks of a worker: `envs` x `episodes`
episodes at once, each `turns` turns; every episode of an environment starts from the same ~150-token task
prompt (shared prefixes), each turn appends the reply and an observation to its context, so later turns
extend earlier ones. Requests go through the worker's batcher (actors/inference/batcher.py) for both backends:
grouped into `generate` calls for transformers (max_batch 16), passed straight to vLLM's continuous batching.
Sampling as the agent does: T = 0.6, top-k 20, top-p 0.95, `tokens` new tokens a turn. Tokens/s counts the
generated tokens over the wall time of the whole workload (start-up and warm-up excluded, reported apart).
Ends with one JSON line whose `ratio` is vLLM / transformers tokens/s (target 2).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from _vllm_venv import reexec_in_vllm_venv  # noqa: E402 (this folder is sys.path[0])
TARGET = 2.0


def _model_path(name: str, scratch: Path) -> str:
    if name == "tiny":
        from learner.tiny_model import build_tiny_model

        return str(build_tiny_model(scratch / "tiny"))
    if name == "smollm2":
        from engine.tools.models import ensure_default_model

        return str(ensure_default_model())
    return name


def _task_prompt(tokenizer, env: int) -> list[int]:
    rules = " ".join(f"Rule {i}: the secret number of room {env} is not {i * 7 + env}." for i in range(12))
    text = f"<|im_start|>user\nYou play a guessing game in room {env}. {rules} Answer with \\boxed{{N}}.<|im_end|>\n<|im_start|>assistant\n"
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def run_workload(backend, args) -> tuple[int, float]:
    """(tokens generated, seconds) for the whole workload through a batcher, as a worker would drive it."""
    import trio

    from actors.inference.base import GenerationRequest
    from actors.inference.batcher import Batcher

    tokenizer = backend.tokenizer
    observation = tokenizer("<|im_end|>\n<|im_start|>user\nWrong, try again.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    prompts = {env: _task_prompt(tokenizer, env) for env in range(args.envs)}
    total = 0

    async def episode(batcher, env):
        nonlocal total
        context = list(prompts[env])
        for _ in range(args.turns):
            request = GenerationRequest(prompt_ids=context, max_new_tokens=args.tokens, temperature=0.6, top_k=20, top_p=0.95)
            generation = await batcher.generate(request)
            total += len(generation.completion_ids)
            context = context + generation.completion_ids + observation

    async def main():
        async with trio.open_nursery() as outer:
            batcher = Batcher(backend, max_batch=16, wait_s=0.05)
            await outer.start(batcher.run)
            async with trio.open_nursery() as episodes:
                for env in range(args.envs):
                    for _ in range(args.episodes):
                        episodes.start_soon(episode, batcher, env)
            outer.cancel_scope.cancel()

    started = time.perf_counter()
    trio.run(main)
    return total, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="smollm2 (the embedded default), tiny, or a model folder")
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=4, help="episodes per environment")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per turn")
    parser.add_argument("--eager", action="store_true", help="vLLM without torch.compile (faster start, slower decode)")
    args = parser.parse_args()
    reexec_in_vllm_venv(__file__)
    import tempfile

    import torch

    from actors.inference.hf import TransformersBackend
    from actors.inference.vllm import VLLMBackend
    from engine.protocol.config import InferenceConfig

    torch.set_num_threads(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as scratch:
        path = _model_path(args.model, Path(scratch))
        results = {}
        started = time.perf_counter()
        hf = TransformersBackend(path, seed=0)
        results["transformers_start_s"] = time.perf_counter() - started
        run_workload(hf, argparse.Namespace(**{**vars(args), "envs": 1, "episodes": 2, "turns": 1}))  # warm-up
        tokens, seconds = run_workload(hf, args)
        results["transformers_tokens_per_s"] = tokens / seconds
        print(f"transformers: {tokens} tokens in {seconds:.1f} s = {tokens / seconds:.1f} tokens/s", flush=True)
        del hf
        started = time.perf_counter()
        vllm = VLLMBackend(path, InferenceConfig(backend="vllm", enforce_eager=args.eager), seed=0)
        results["vllm_start_s"] = time.perf_counter() - started
        try:
            run_workload(vllm, argparse.Namespace(**{**vars(args), "envs": 1, "episodes": 2, "turns": 1}))
            tokens, seconds = run_workload(vllm, args)
        finally:
            vllm.close()
        results["vllm_tokens_per_s"] = tokens / seconds
        print(f"vLLM: {tokens} tokens in {seconds:.1f} s = {tokens / seconds:.1f} tokens/s (start {results['vllm_start_s']:.0f} s)", flush=True)
    ratio = results["vllm_tokens_per_s"] / results["transformers_tokens_per_s"]
    workload = {k: getattr(args, k) for k in ("model", "envs", "episodes", "turns", "tokens", "eager")}
    print(json.dumps({"bench": "inference", "ratio": round(ratio, 3), "target": TARGET, **{k: round(v, 2) for k, v in results.items()}, **workload}))


if __name__ == "__main__":
    main()
