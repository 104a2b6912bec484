"""The learner's dtypes (learner/precision.py, learner/cast_check.py): under model.dtype bfloat16 the learner keeps
fp32 master weights that take updates bf16 would round away, computes in bf16, publishes bf16 versions (half the
bytes) whose log-probs agree with the fp32 learner's, and refuses to publish weights whose log-probs do not."""

import json

import pytest
import torch
from safetensors import safe_open

from engine.protocol.config import LearnerConfig
from engine.protocol.errors import InputError
from learner import cast_check, precision
from learner.logprobs import token_logprobs
from learner.trainer import Trainer
from tests.learner.learner_helpers import random_batch

# The paper's learning rate: an AdamW step moves a weight by ~1e-6, below bf16's resolution for almost every weight.
CONFIG = LearnerConfig(lora_rank=0, learning_rate=1e-6, micro_batch_tokens=64, device="cpu")
WEIGHT = "model.layers.0.self_attn.q_proj.weight"  # every element has a gradient from any batch


def _safetensors(folder):
    tensors = {}
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(file, framework="pt") as f:
            tensors.update({key: f.get_tensor(key) for key in f.keys()})
    return tensors


def _bytes(folder):
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


def test_bf16_keeps_fp32_master_weights_that_take_updates_bf16_would_round_away(tiny_model_path):
    trainer = Trainer(tiny_model_path, CONFIG, dtype="bfloat16")
    assert trainer.autocast and {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    weight = dict(trainer.model.named_parameters())[WEIGHT]
    before = weight.detach().clone()
    seen = {}

    def take_gradient(optimizer, args, kwargs):  # the gradient and lr of the first step, for the bf16 contrast
        seen.setdefault("grad", weight.grad.detach().clone())
        seen.setdefault("lr", optimizer.param_groups[0]["lr"])

    trainer.optimizer.register_step_pre_hook(take_gradient)
    projection = trainer.model.get_submodule(WEIGHT.removesuffix(".weight"))

    def take_dtype(module, args, out):
        seen.setdefault("compute", out.dtype)

    projection.register_forward_hook(take_dtype)
    assert trainer.update(random_batch(1))["optimizer_step"] == 1
    assert seen["compute"] == torch.bfloat16  # computed in bf16 (autocast on the CPU)
    assert weight.dtype == torch.float32
    states = [v for state in trainer.optimizer.state.values() for v in state.values() if v.is_floating_point() and v.ndim]
    assert states and {v.dtype for v in states} == {torch.float32}
    moved = (weight.detach() != before).float().mean().item()
    assert moved > 0.99, f"only {moved:.1%} of the fp32 master weights moved"

    # The same AdamW step on the weight held in bf16 (as model.dtype = bfloat16 used to train): it rounds away.
    bf16 = before.to(torch.bfloat16).requires_grad_(True)
    bf16.grad = seen["grad"].to(torch.bfloat16)
    group = trainer.optimizer.param_groups[0]
    torch.optim.AdamW([bf16], lr=seen["lr"], betas=group["betas"], weight_decay=group["weight_decay"], eps=group["eps"]).step()
    moved_in_bf16 = (bf16.detach() != before.to(torch.bfloat16)).float().mean().item()
    assert moved_in_bf16 < 0.1, f"{moved_in_bf16:.1%} of the bf16 weights moved"


def test_float32_computes_in_fp32_and_skips_the_cast_check(tiny_model_path, tmp_path):
    trainer = Trainer(tiny_model_path, CONFIG, dtype="float32")
    assert not trainer.autocast
    trainer.update(random_batch(1))
    trainer.publish(tmp_path / "policy", keep=1)
    assert trainer.cast_check == {}  # the cast is the identity: nothing to compare


def test_bf16_versions_are_half_the_bytes_and_checkpoints_keep_fp32(tiny_model_path, tmp_path):
    folders = {}
    for dtype in ("float32", "bfloat16"):
        trainer = Trainer(tiny_model_path, CONFIG, dtype=dtype)
        folders[dtype] = trainer.publish(tmp_path / dtype / "policy", keep=1)
    fp32, bf16 = _bytes(folders["float32"]), _bytes(folders["bfloat16"])
    assert bf16 == pytest.approx(fp32 / 2, rel=0.005), (fp32, bf16)  # the same tensors (tied weights once), 2 bytes each
    assert {t.dtype for t in _safetensors(folders["bfloat16"]).values()} == {torch.bfloat16}
    assert _safetensors(folders["bfloat16"]).keys() == _safetensors(folders["float32"]).keys()
    assert json.loads((folders["bfloat16"] / "config.json").read_text())["dtype"] == "bfloat16"

    checkpoint = trainer.save_checkpoint(tmp_path / "checkpoint", step=0)  # the bf16 trainer's: fp32 masters
    assert {t.dtype for t in _safetensors(checkpoint).values()} == {torch.float32} and _bytes(checkpoint) == fp32


def test_published_bf16_log_probs_agree_with_the_fp32_learner(tiny_model_path, tmp_path):
    from transformers import AutoModelForCausalLM

    trainer = Trainer(tiny_model_path, CONFIG, dtype="bfloat16")
    batch = random_batch(2)
    trainer.update(batch)
    folder = trainer.publish(tmp_path / "policy", keep=1)
    gap = trainer.cast_check  # the learner's own check, as its metrics carry it
    assert gap["cast_probe_tokens"] > 0
    assert 0 < gap["cast_logprob_gap_mean"] <= cast_check.MEAN_BOUND and gap["cast_logprob_gap_max"] <= cast_check.MAX_BOUND

    published = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
    from engine.protocol.messages import unpack_ints

    ids = torch.tensor([unpack_ints(s.tokens) for s in batch[:1]])
    with torch.no_grad():
        theirs = token_logprobs(published, ids, torch.ones_like(ids), 1.0)[0, 1:]
        fp32 = token_logprobs(trainer.model, ids, torch.ones_like(ids), 1.0)[0, 1:]  # the masters, computed in fp32
    diff = (theirs - fp32).abs()
    assert diff.mean() <= cast_check.MEAN_BOUND and diff.max() <= cast_check.MAX_BOUND
    assert diff.max() > 0  # the published weights are the cast ones, not the masters


def test_a_published_folder_that_is_not_the_learners_weights_is_refused(tiny_model_path, tmp_path, monkeypatch):
    trainer = Trainer(tiny_model_path, CONFIG, dtype="bfloat16")
    trainer.update(random_batch(1))
    cast = precision.cast_state_dict

    def wrong_cast(state, dtype):  # a broken cast: the final norm's gain scaled, every logit with it (~90 nats off)
        return {k: v * 100 if k == "model.norm.weight" else v for k, v in cast(state, dtype).items()}

    monkeypatch.setattr(precision, "cast_state_dict", wrong_cast)
    with pytest.raises(cast_check.CastGapTooLarge, match=r"refusing to publish policy version 1: its bfloat16 weights' log-probs differ"):
        trainer.publish(tmp_path / "policy", keep=1)
    assert not (tmp_path / "policy" / "v000001").exists() and (tmp_path / "policy" / ".tmp-v000001").is_dir()


def test_lora_under_bf16_trains_an_fp32_adapter_on_a_bf16_base(tiny_model_path, tmp_path):
    config = LearnerConfig(lora_rank=4, learning_rate=1e-3, micro_batch_tokens=64, device="cpu")
    trainer = Trainer(tiny_model_path, config, dtype="bfloat16")
    trained = {p.dtype for p in trainer.model.parameters() if p.requires_grad}
    frozen = {p.dtype for p in trainer.model.parameters() if not p.requires_grad}
    assert trained == {torch.float32} and frozen == {torch.bfloat16}  # the base is what the workers hold
    trainer.update(random_batch(1))
    trainer.update(random_batch(2))  # the second step moves lora_A too: the merged adapter changes the logits
    folder = trainer.publish(tmp_path / "policy", keep=1)
    assert {t.dtype for t in _safetensors(folder).values()} == {torch.float32}  # the adapter as trained
    gap = trainer.cast_check  # the workers' model: the bf16 base with the adapter merged
    assert 0 <= gap["cast_logprob_gap_mean"] <= cast_check.MEAN_BOUND and gap["cast_probe_tokens"] > 0


def test_a_trained_parameter_that_is_not_fp32_is_refused():
    model = torch.nn.Linear(2, 2).to(torch.bfloat16)
    with pytest.raises(InputError, match=r"trained parameter weight is bfloat16, not fp32 \(2 such\)"):
        precision.require_fp32_masters(model)
    model.requires_grad_(False)
    precision.require_fp32_masters(model)  # frozen weights may be bf16


def test_compute_dtype_follows_model_dtype():
    cpu = torch.device("cpu")
    assert precision.compute_dtype("float32", cpu) is None
    assert precision.compute_dtype("bfloat16", cpu) == torch.bfloat16
    with pytest.raises(InputError, match=r"model.dtype is 'float16'"):
        precision.compute_dtype("float16", cpu)
