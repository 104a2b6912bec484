"""Must-show: the behaviour log-probs recorded by the inference backend equal the learner's recomputation."""

import torch

from actors.inference.base import GenerationRequest
from actors.inference.hf import TransformersBackend
from engine.messages import Sample
from learner.logprobs import token_logprobs
from engine.messages import pack_floats, pack_ints, pack_mask


def test_backend_logprobs_match_learner_recomputation(tiny_model_path):
    backend = TransformersBackend(tiny_model_path, seed=3)
    tok = backend.tokenizer
    prompts = [tok("def add(a, b):", add_special_tokens=False)["input_ids"], tok("x = [1, 2, 3]\nfor i in", add_special_tokens=False)["input_ids"]]
    requests = [GenerationRequest(prompt_ids=p, max_new_tokens=16, temperature=0.7, top_p=0.95, top_k=20) for p in prompts]
    generations = backend.generate(requests)  # one left-padded batch
    for prompt, generation in zip(prompts, generations):
        assert generation.completion_ids
        ids = torch.tensor([prompt + generation.completion_ids])
        with torch.no_grad():
            recomputed = token_logprobs(backend.model, ids, torch.ones_like(ids), 0.7)[0, len(prompt) :]
        assert torch.allclose(recomputed, torch.tensor(generation.logprobs), atol=1e-4), (recomputed, generation.logprobs)


def test_trainer_sees_zero_mismatch_on_its_own_samples(tiny_model_path):
    from engine.config import LearnerConfig
    from learner.trainer import Trainer

    backend = TransformersBackend(tiny_model_path, seed=5)
    prompt = backend.tokenizer("import os\n", add_special_tokens=False)["input_ids"]
    generation = backend.generate([GenerationRequest(prompt_ids=prompt, max_new_tokens=12, temperature=1.0)])[0]
    n = len(generation.completion_ids)
    sample = Sample(
        sample_id="s", role="agent", env_id="e", skill="k", arm="no_hint", step=0,
        tokens=pack_ints(prompt + generation.completion_ids), loss_mask=pack_mask([0] * len(prompt) + [1] * n),
        logprobs=pack_floats([0.0] * len(prompt) + generation.logprobs), versions=pack_ints([-1] * len(prompt) + [0] * n),
        reward=1.0, advantage=1.0, temperature=1.0,
    )
    trainer = Trainer(tiny_model_path, LearnerConfig(learning_rate=1e-3))
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    metrics = trainer.update([sample])
    assert metrics["mismatch_k3"] < 1e-6
    assert abs(metrics["behaviour_weight_mean"] - 1.0) < 1e-4
    assert metrics["optimizer_step"] == 1.0
    changed = any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    assert changed
