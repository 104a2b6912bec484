"""A LoRA adapter merged into the base weights as a full model folder (actors/inference/adapter_merge.py), for vLLM:
the folder loads with from_pretrained and gives the trainer's own log-probs; a mismatched adapter is refused."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from actors.inference.adapter_merge import AdapterMergeError, AdapterMerger
from engine.protocol.config import LearnerConfig
from learner.logprobs import token_logprobs
from learner.trainer import Trainer
from tests.learner.learner_helpers import random_batch

IDS = [5, 6, 7, 8, 9, 10, 11, 12]


@pytest.fixture(scope="module")
def lora_policy(tiny_model_path, tmp_path_factory):
    trainer = Trainer(tiny_model_path, LearnerConfig(learning_rate=1e-2, lora_rank=4, lora_alpha=8.0, micro_batch_tokens=32), seed=0)
    trainer.update(random_batch(1))
    trainer.update(random_batch(2))
    folder = trainer.publish(tmp_path_factory.mktemp("policy"), keep=2)
    trainer.model.eval()
    return trainer, folder


def _logprobs(model):
    tokens = torch.tensor([IDS])
    with torch.no_grad():
        return token_logprobs(model, tokens, torch.ones_like(tokens), 1.0)[0]


def test_the_merged_folder_gives_the_trainers_log_probs(tiny_model_path, lora_policy):
    trainer, adapter = lora_policy
    merger = AdapterMerger(tiny_model_path)
    try:
        folder = merger.merged(adapter, version=2)
        merged = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
        base = AutoModelForCausalLM.from_pretrained(tiny_model_path, torch_dtype=torch.float32).eval()
        assert torch.allclose(_logprobs(merged), _logprobs(trainer.model), atol=1e-5)
        assert not torch.allclose(_logprobs(base), _logprobs(trainer.model), atol=1e-4)  # the adapter did move it
        # only the adapted modules changed
        changed = {k for k, v in load_file(folder / "model.safetensors").items() if not torch.equal(v, base.state_dict()[k])}
        assert changed and all(k.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight")) for k in changed)
        for version in (3, 4):
            merger.merged(adapter, version)
        assert not folder.exists() and (folder.parent / "v4").is_dir()  # the newest two are kept
    finally:
        merger.close()
    assert not folder.parent.exists()


def test_an_adapter_that_does_not_fit_the_base_is_refused(tiny_model_path, lora_policy, tmp_path):
    _, adapter = lora_policy
    weights = load_file(adapter / "adapter_model.safetensors")
    key = next(k for k in weights if k.endswith(".lora_A.weight"))
    weights[key.replace("self_attn", "no_such_module")] = weights[key].clone()
    weights[key.replace("self_attn", "no_such_module").replace("lora_A", "lora_B")] = weights[key.replace("lora_A", "lora_B")].clone()
    save_file(weights, tmp_path / "adapter_model.safetensors")
    (tmp_path / "adapter_config.json").write_text((adapter / "adapter_config.json").read_text())
    merger = AdapterMerger(tiny_model_path)
    try:
        with pytest.raises(AdapterMergeError, match="no base weight .*no_such_module"):
            merger.merged(tmp_path, version=1)
    finally:
        merger.close()
    assert json.loads((adapter / "adapter_config.json").read_text())["r"] == 4
