"""Workers load what the learner publishes: a full model folder, or (LoRA) only an adapter onto their base model."""

import json

import pytest
import torch

from actors.inference.base import GenerationRequest
from actors.inference.hf import TransformersBackend, is_adapter_folder
from actors.inference.scripted import ScriptedBackend
from engine.protocol.config import LearnerConfig
from learner.logprobs import token_logprobs
from learner.trainer import Trainer
from tests.learner.learner_helpers import random_batch

PROMPT = [5, 6, 7, 8, 9, 10]


@pytest.fixture(scope="module")
def lora_policy(tiny_model_path, tmp_path_factory):
    """A LoRA trainer after two updates (adapter A and B both moved) and the adapter it published."""
    config = LearnerConfig(learning_rate=1e-2, lora_rank=4, mini_batches=2, micro_batch_tokens=32)
    trainer = Trainer(tiny_model_path, config, seed=0)
    trainer.update(random_batch(1))
    trainer.update(random_batch(2))
    folder = trainer.publish(tmp_path_factory.mktemp("policy"), keep=2)
    trainer.model.eval()
    return trainer, folder


def _trainer_logprobs(trainer, ids):
    tokens = torch.tensor([ids])
    with torch.no_grad():
        return token_logprobs(trainer.model, tokens, torch.ones_like(tokens), 1.0)[0]


def test_transformers_backend_applies_the_published_adapter(tiny_model_path, lora_policy):
    trainer, folder = lora_policy
    assert is_adapter_folder(folder)
    backend = TransformersBackend(tiny_model_path)
    base = backend.model
    request = GenerationRequest(prompt_ids=PROMPT, max_new_tokens=8, temperature=0.0)
    before = backend.generate([request])[0]

    backend.load_weights(str(folder), 1)
    assert backend.policy_version == 1 and backend.loader.base is base and backend.model is not base
    after = backend.generate([request])[0]
    expected = _trainer_logprobs(trainer, PROMPT + after.completion_ids)[len(PROMPT) :]
    assert after.logprobs == pytest.approx(expected.tolist(), abs=1e-4)
    assert before.logprobs != pytest.approx(after.logprobs, abs=1e-4)  # the adapter changed the policy
    ids = torch.tensor([PROMPT + after.completion_ids])
    with torch.no_grad():
        worker = token_logprobs(backend.model, ids, torch.ones_like(ids), 1.0)[0]
    assert torch.allclose(worker, _trainer_logprobs(trainer, ids[0].tolist()), atol=1e-4)

    # The base stays pristine: loading the same adapter again gives the same weights (not adapter applied twice).
    merged = {k: v.clone() for k, v in backend.model.state_dict().items()}
    backend.load_weights(str(folder), 2)
    assert all(torch.equal(v, backend.model.state_dict()[k]) for k, v in merged.items())
    # A full model folder is still loaded as is (and the base copy is then dropped).
    backend.load_weights(tiny_model_path, 3)
    assert backend.loader.base is None and backend.generate([request])[0].logprobs == pytest.approx(before.logprobs, abs=1e-6)


def test_scripted_backend_applies_the_published_adapter(tiny_model_path, lora_policy, tmp_path):
    trainer, folder = lora_policy
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"designer": ["x = 1"], "hint": ["try"], "agent": ["def f(): return 2"]}))
    backend = ScriptedBackend(tiny_model_path, str(script))
    backend.load_weights(str(folder), 1)
    generation = backend.generate([GenerationRequest(prompt_ids=PROMPT, max_new_tokens=16, temperature=1.0)])[0]
    expected = _trainer_logprobs(trainer, PROMPT + generation.completion_ids)[len(PROMPT) :]
    assert generation.logprobs == pytest.approx(expected.tolist(), abs=1e-4)
