"""A weight reload into a *compiled* vLLM engine serves exactly the new weights (`bin/test --vllm`, from .venv-vllm).

The other vLLM tests run eager (`enforce_eager`) to start fast; peers report that a reload under compiled graphs can
serve garbled or stale output (graphs holding the old buffers: vllm-project/vllm#48941; a stale reload: #32718).
Here the engine runs with compilation on (vLLM's default; on CPU, torch.compile with the inductor backend, no CUDA
graphs), for a tied-head model (the head the reload skips and the backend rebuilds), an untied-head one, and a LoRA
adapter merged into the base weights (actors/inference/adapter_merge.py). After each reload the greedy tokens and
their log-probs must equal
- on new weights: the transformers reference on the same folder (the learner's numbers, as test_vllm.py checks eager);
- back on the weights it started with: this engine's own outputs when it was fresh, i.e. a fresh compiled engine's.
Each reload changes the weights visibly (asserted), so a stale reload cannot pass. A compiled start costs minutes on
CPU, so there are two engines, each started once: tied v0 -> LoRA merged onto v0 -> v1 -> v0 (the last reload changes
the embedding, so the rebuilt tied head is checked against the fresh engine), and untied u0 -> u1 -> u0.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from actors.inference.base import GenerationRequest
from engine.protocol.config import InferenceConfig

pytestmark = pytest.mark.vllm

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")
PROMPTS = ("def add(a, b):", "x = [1, 2, 3]\nfor i in", "import os\n", "class Stack:\n    def")
NEW_TOKENS = 12
LOGPROB_TOLERANCE = 1e-4  # fp32 on both sides (as test_vllm.py): a stale or garbled reload is off by far more
DIFFERENT_WEIGHTS = 1e-2  # the two weight sets' outputs differ by at least this, or the comparison would prove nothing


def _inference() -> InferenceConfig:
    return InferenceConfig(backend="vllm", kv_cache_gb=0.25, enforce_eager=False, max_model_len=512,
                           request_timeout_s=600.0, sync_timeout_s=300.0)


def _with_tokenizer(source: str | Path, folder: Path) -> str:
    for name in TOKENIZER_FILES:
        if (Path(source) / name).exists():
            shutil.copy(Path(source) / name, folder / name)
    return str(folder)


def _variant(source: str, folder: Path, *, seed: int, scale: float = 0.05, untie: bool = False) -> str:
    """`source`'s weights, each moved by N(0, scale^2); `untie`: with an LM head of its own (the embedding plus noise)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    if untie:
        config = AutoConfig.from_pretrained(source)
        config.tie_word_embeddings = False
        untied = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
        embedding = state["model.embed_tokens.weight"]
        state["lm_head.weight"] = embedding + torch.randn(embedding.shape, generator=generator) * 0.05
        untied.load_state_dict(state, strict=True)
        model = untied
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * scale)
    model.save_pretrained(folder)
    return _with_tokenizer(source, folder)


def _lora_adapter(base: str, folder: Path) -> str:
    """A peft adapter on `base` with random (non-zero) A and B, as a LoRA learner publishes it."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(3)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(folder)
    return str(folder)


def _merged(base: str, adapter: str, folder: Path) -> str:
    """The full model folder the backend builds from `adapter` on `base`, for an engine to start on."""
    from actors.inference.adapter_merge import AdapterMerger

    merger = AdapterMerger(base)
    try:
        shutil.copytree(merger.merged(adapter, 1), folder)
    finally:
        merger.close()
    return _with_tokenizer(base, folder)


@dataclass
class Run:
    """One compiled engine: its outputs when fresh, then after each reload (label, reference folder, outputs)."""

    fresh: list
    steps: list
    compilation: tuple[str, str]


def _probe(backend) -> list:
    return backend.generate(_requests(backend.tokenizer))


def _requests(tokenizer) -> list[GenerationRequest]:
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in PROMPTS]
    return [GenerationRequest(prompt_ids=p, max_new_tokens=NEW_TOKENS, temperature=0.0) for p in ids]


def _start_then_reload(start: str, reloads: list[tuple[str, str, str]]) -> Run:
    """Start a compiled engine on `start`, probe it, then for each (label, folder to load, reference folder): load, probe."""
    from actors.inference.vllm import VLLMBackend

    started = time.perf_counter()
    backend = VLLMBackend(start, _inference(), seed=0)
    timings = [f"start {time.perf_counter() - started:.0f} s"]
    try:
        config = backend._engine.vllm_config.compilation_config
        compilation = (getattr(config.mode, "name", str(config.mode)), str(config.backend))
        fresh = _probe(backend)
        steps = []
        for version, (label, load, reference) in enumerate(reloads, start=1):
            started = time.perf_counter()
            backend.load_weights(load, version)
            timings.append(f"reload {label} {time.perf_counter() - started:.2f} s")
            steps.append((label, reference, _probe(backend)))
    finally:
        backend.close()
    print(f"compiled engine ({compilation}) on {Path(start).name}: " + ", ".join(timings))
    return Run(fresh, steps, compilation)


@pytest.fixture(scope="module")
def base_model_path(tmp_path_factory):
    """The tiny model with 2 layers instead of 4: compiling it takes about half as long, and it exercises the same code."""
    from learner.tiny_model import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("compiled-base") / "tiny-2-layers", layers=2))


@pytest.fixture(scope="module")
def tied_run(base_model_path, tmp_path_factory):
    root = tmp_path_factory.mktemp("compiled-tied")
    v0 = base_model_path
    v1 = _variant(v0, root / "tied-v1", seed=11)
    adapter = _lora_adapter(v0, root / "lora-adapter")
    merged = _merged(v0, adapter, root / "tied-v0-lora-merged")
    reloads = [("lora-merged", adapter, merged), ("tied", v1, v1), ("tied-back-to-start", v0, "fresh")]
    return _start_then_reload(v0, reloads)


@pytest.fixture(scope="module")
def untied_run(base_model_path, tmp_path_factory):
    root = tmp_path_factory.mktemp("compiled-untied")
    u0 = _variant(base_model_path, root / "untied-v0", seed=21, scale=0.0, untie=True)
    u1 = _variant(u0, root / "untied-v1", seed=22)
    return _start_then_reload(u0, [("untied", u1, u1), ("untied-back-to-start", u0, "fresh")])


def _transformers_reference(folder: str) -> list:
    """Greedy tokens and log-probs of the transformers backend on `folder`, one prompt at a time (no padding)."""
    from actors.inference.hf import TransformersBackend

    backend = TransformersBackend(folder)
    return [backend.generate([request])[0] for request in _requests(backend.tokenizer)]


def _max_logprob_gap(left, right) -> float:
    return max(abs(x - y) for g, h in zip(left, right) for x, y in zip(g.logprobs, h.logprobs))


@pytest.mark.parametrize("case", ["lora-merged", "tied", "tied-back-to-start", "untied", "untied-back-to-start"])
def test_a_reload_under_compilation_serves_exactly_the_new_weights(request, case):
    run = request.getfixturevalue("untied_run" if case.startswith("untied") else "tied_run")
    assert run.compilation[0] not in ("NONE", "0") and run.compilation[1] != "eager", f"the engine ran uncompiled: {run.compilation}"
    labels = [label for label, _, _ in run.steps]
    index = labels.index(case)
    _, reference_folder, served = run.steps[index]
    previous = run.steps[index - 1][2] if index else run.fresh
    reference = run.fresh if reference_folder == "fresh" else _transformers_reference(reference_folder)
    # The weights before and after this reload differ visibly, so equality below shows the new ones are served.
    differ = any(g.completion_ids != h.completion_ids for g, h in zip(reference, previous))
    assert differ or _max_logprob_gap(reference, previous) > DIFFERENT_WEIGHTS, f"{case}: the reload would change nothing"
    for prompt, after, expected in zip(PROMPTS, served, reference):
        assert after.policy_version == index + 1
        assert after.completion_ids == expected.completion_ids, (case, prompt)
        assert len(after.logprobs) == len(after.completion_ids)
        gap = max(abs(x - y) for x, y in zip(after.logprobs, expected.logprobs))
        assert gap < LOGPROB_TOLERANCE, (case, prompt, gap)
