"""The vLLM backend on CPU with the tiny random model (no download): `bin/test --vllm` (runs from .venv-vllm).

Generation, stop strings, log-probs equal to the learner's recomputation, an in-place weight update followed by generation
from the new weights, a weight update that hangs failing within its timeout, a several-turn agent episode, and a
LoRA adapter merged into the base weights and served with the trainer's log-probs.
"""

import os
import shutil
import time
from pathlib import Path

import pytest
import torch
import trio

from actors.inference.base import GenerationRequest
from engine.protocol.config import InferenceConfig, PlayConfig
from learner.logprobs import token_logprobs
from tests.actors.inference.stop_helpers import assert_stops_at_the_first_stop_string

pytestmark = pytest.mark.vllm

PICK = (Path(__file__).parents[2] / "e2e" / "data" / "pick_env.py").read_text()


def _inference(**overrides) -> InferenceConfig:
    settings = dict(backend="vllm", kv_cache_gb=0.25, enforce_eager=True, max_model_len=2048, request_timeout_s=300.0, sync_timeout_s=120.0)
    return InferenceConfig(**{**settings, **overrides})


@pytest.fixture(scope="module")
def backend(tiny_model_path):
    from actors.inference.vllm import VLLMBackend

    started = time.perf_counter()
    backend = VLLMBackend(tiny_model_path, _inference(), seed=0)
    print(f"vLLM backend started in {time.perf_counter() - started:.1f} s")
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def perturbed_model_path(tiny_model_path, tmp_path_factory):
    """The tiny model with every weight moved: a policy version 1 as the learner would publish it."""
    from transformers import AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("policy") / "v000001"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (Path(tiny_model_path) / name).exists():
            shutil.copy(Path(tiny_model_path) / name, folder / name)
    return str(folder)


def _prompts(tokenizer):
    texts = ["def add(a, b):", "x = [1, 2, 3]\nfor i in", "import os\n"]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def _assert_learner_logprobs(model_path, prompt, generation, temperature):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    ids = torch.tensor([prompt + generation.completion_ids])
    with torch.no_grad():
        recomputed = token_logprobs(model, ids, torch.ones_like(ids), temperature)[0, len(prompt) :]
    gap = (recomputed - torch.tensor(generation.logprobs)).abs().max().item()
    assert gap < 1e-4, gap


def test_generation_stops_on_the_turn_end_within_the_budget(backend):
    prompts = _prompts(backend.tokenizer)
    requests = [GenerationRequest(prompt_ids=p, max_new_tokens=n, temperature=0.8) for p, n in zip(prompts, (5, 24, 40))]
    generations = backend.generate(requests)
    for request, generation in zip(requests, generations):
        assert 1 <= len(generation.completion_ids) <= request.max_new_tokens
        assert len(generation.logprobs) == len(generation.completion_ids)
        assert generation.policy_version == 0
        assert generation.text == backend.tokenizer.decode(generation.completion_ids, skip_special_tokens=True)
        ends = generation.completion_ids[-1] in backend.stop_ids
        assert generation.finish_reason == ("stop" if ends else "length")
        assert ends or len(generation.completion_ids) == request.max_new_tokens
        assert not any(t in backend.stop_ids for t in generation.completion_ids[:-1])


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, 20, 0.95), (1.0, 0, 1.0), (0.3, 0, 0.9)])
def test_logprobs_equal_the_learner_recomputation(backend, tiny_model_path, temperature, top_k, top_p):
    """log softmax(logits / T) before top-k/top-p, within 1e-4 in fp32 (vLLM's processed_logprobs would be
    off by the log of the kept mass under top-k/top-p; its raw_logprobs ignore T)."""
    prompts = _prompts(backend.tokenizer)
    requests = [GenerationRequest(prompt_ids=p, max_new_tokens=16, temperature=temperature, top_k=top_k, top_p=top_p) for p in prompts]
    for prompt, generation in zip(prompts, backend.generate(requests)):
        _assert_learner_logprobs(tiny_model_path, prompt, generation, temperature)


def test_weight_update_then_generation_follows_the_new_weights(backend, tiny_model_path, perturbed_model_path):
    from actors.inference.hf import TransformersBackend

    prompt = _prompts(backend.tokenizer)[0]
    greedy = GenerationRequest(prompt_ids=prompt, max_new_tokens=12, temperature=0.0)
    before = backend.generate([greedy])[0]
    assert before.completion_ids == TransformersBackend(tiny_model_path).generate([greedy])[0].completion_ids
    started = time.perf_counter()
    backend.load_weights(perturbed_model_path, 1)
    print(f"in-place weight update: {time.perf_counter() - started:.2f} s")
    assert backend.policy_version == 1
    after = backend.generate([greedy])[0]
    assert after.policy_version == 1
    assert after.completion_ids == TransformersBackend(perturbed_model_path).generate([greedy])[0].completion_ids
    assert after.completion_ids != before.completion_ids
    sampled = backend.generate([GenerationRequest(prompt_ids=prompt, max_new_tokens=16, temperature=0.7, top_k=20, top_p=0.95)])[0]
    _assert_learner_logprobs(perturbed_model_path, prompt, sampled, 0.7)


def test_agent_episode_of_several_turns(backend, tiny_model_path, perturbed_model_path):
    """A real episode (sandbox, chat context, batcher) over vLLM: every sampled token's recorded log-prob is the
    learner's recomputation on the whole multi-turn sequence (the turns share their prefix in vLLM's cache)."""
    from actors.agent import play_game_episode
    from actors.inference.batcher import Batcher
    from actors.sandbox import open_sandbox_pool
    from engine.protocol.messages import PlayTask, unpack_floats, unpack_ints, unpack_mask

    task = PlayTask(task_id="t", env_id="e", skill="s", code=PICK, hint="", arm="no_hint", seed=1, step=0)
    play = PlayConfig(max_turns=3, agent_max_tokens=12, agent_temperature=0.7)

    async def main():
        async with open_sandbox_pool(workers=1) as pool, trio.open_nursery() as nursery:
            batcher = Batcher(backend, max_batch=8, wait_s=0.01)
            await nursery.start(batcher.run)
            result = await play_game_episode(task, batcher=batcher, pool=pool, tokenizer=backend.tokenizer, play_config=play, worker_id="w")
            nursery.cancel_scope.cancel()
            return result

    result = trio.run(main)
    assert len(result.turns) >= 2, result
    ids, mask = unpack_ints(result.agent.tokens), unpack_mask(result.agent.loss_mask)
    behaviour, versions = unpack_floats(result.agent.logprobs), unpack_ints(result.agent.versions)
    assert set(versions[mask == 1].tolist()) == {backend.policy_version}
    from transformers import AutoModelForCausalLM

    model_path = {0: tiny_model_path, 1: perturbed_model_path}[backend.policy_version]
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    tokens = torch.tensor([ids.tolist()])
    with torch.no_grad():
        recomputed = token_logprobs(model, tokens, torch.ones_like(tokens), 0.7)[0].numpy()
    gap = abs(recomputed[mask == 1] - behaviour[mask == 1]).max()
    assert gap < 1e-4, gap


def test_a_hanging_weight_update_raises_within_its_timeout(tiny_model_path, tmp_path):
    """The new weights' file is a FIFO nobody writes: the reload blocks inside vLLM; load_weights gives up."""
    from actors.inference.vllm import VLLMBackend, WeightSyncError

    folder = tmp_path / "v000001"
    folder.mkdir()
    shutil.copy(Path(tiny_model_path) / "config.json", folder / "config.json")
    os.mkfifo(folder / "model.safetensors")
    backend = VLLMBackend(tiny_model_path, _inference(sync_timeout_s=5.0), seed=0)
    try:
        started = time.perf_counter()
        with pytest.raises(WeightSyncError, match=r"^loading policy v1 from .* into vLLM failed: TimeoutError"):
            backend.load_weights(str(folder), 1)
        elapsed = time.perf_counter() - started
        assert 4.0 < elapsed < 20.0, elapsed
        assert backend.policy_version == 0
        with pytest.raises(WeightSyncError, match="failed a weight update"):
            backend.generate([GenerationRequest(prompt_ids=[5, 6, 7], max_new_tokens=4, temperature=1.0)])
    finally:
        backend.close()


def test_a_lora_adapter_is_merged_and_served_with_the_trainers_log_probs(backend, tiny_model_path, tmp_path):
    """A LoRA learner publishes only its adapter; the backend merges it into the base weights (adapter_merge.py) and
    samples with exactly the trainer's log-probs, so LoRA runs on vLLM too."""
    from engine.protocol.config import LearnerConfig
    from learner.trainer import Trainer
    from tests.learner.learner_helpers import random_batch

    trainer = Trainer(tiny_model_path, LearnerConfig(learning_rate=1e-2, lora_rank=4, micro_batch_tokens=32), seed=0)
    trainer.update(random_batch(1))
    adapter = trainer.publish(tmp_path, keep=2)
    trainer.model.eval()
    backend.load_weights(str(adapter), 10)
    assert backend.policy_version == 10
    prompt = _prompts(backend.tokenizer)[1]
    sampled = backend.generate([GenerationRequest(prompt_ids=prompt, max_new_tokens=16, temperature=0.7, top_k=20, top_p=0.95)])[0]
    ids = torch.tensor([prompt + sampled.completion_ids])
    with torch.no_grad():
        recomputed = token_logprobs(trainer.model, ids, torch.ones_like(ids), 0.7)[0, len(prompt):]
    assert sampled.policy_version == 10
    assert (recomputed - torch.tensor(sampled.logprobs)).abs().max().item() < 1e-4


def test_generation_stops_at_the_first_stop_string(backend):
    assert_stops_at_the_first_stop_string(backend, _prompts(backend.tokenizer)[0])
