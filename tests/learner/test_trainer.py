"""The trainer: mixed-role batches, per-role losses, publishing and checkpoints that transformers loads."""

import pytest
import torch

from engine.protocol.config import LearnerConfig, ObjectiveConfig
from engine.protocol.config_loading import ConfigError
from engine.protocol.messages import Sample
from learner.trainer import Trainer
from tests.learner.learner_helpers import make_sample
from engine.protocol.messages import pack_floats, pack_ints, pack_mask


@pytest.mark.parametrize("objective", ["decoupled_ppo", "tis", "icepop"])
def test_mixed_roles_update_and_publish(tiny_model_path, tmp_path, objective):
    trainer = Trainer(tiny_model_path, LearnerConfig(lora_rank=0, objective=ObjectiveConfig(name=objective), learning_rate=1e-3, micro_batch_tokens=16))
    samples = [
        make_sample("agent", [5, 6, 7, 8, 9], 1.0, "a1"),
        make_sample("agent", [5, 6, 10, 11], -1.0, "a2"),
        make_sample("agent", [5, 6, 12], 0.0, "a3"),  # zero advantage: counted in the token mean, not run
        make_sample("designer", [1, 2, 3, 4, 5, 6, 7], 0.5, "d1"),
    ]
    metrics = trainer.update(samples)
    assert metrics["trained_samples"] == 3 and metrics["zero_advantage_samples"] == 1
    assert metrics["loss"] == pytest.approx(metrics["loss_agent"] + metrics["loss_designer"], abs=1e-6)
    assert metrics["staleness_0"] == 3 + 2 + 5
    folder = trainer.publish(tmp_path / "policy", keep=2)
    assert folder.name == "v000001" and (folder / "model.safetensors").exists()
    checkpoint = trainer.save_checkpoint(tmp_path / "ckpt", step=0)
    state = torch.load(checkpoint / "trainer_state.pt", weights_only=False)
    assert state["version"] == 1 and state["updates"] == 1


def test_kl_to_reference_loads_a_frozen_copy(tiny_model_path):
    trainer = Trainer(tiny_model_path, LearnerConfig(lora_rank=0, objective=ObjectiveConfig(kl_coef=0.1), learning_rate=1e-3))
    assert trainer.reference is not None and not any(p.requires_grad for p in trainer.reference.parameters())
    metrics = trainer.update([make_sample("agent", [5, 6, 7, 8], 1.0, "a")])
    assert metrics["kl_ref"] == pytest.approx(0.0, abs=1e-6)  # before the step the policy is the reference


def _on_policy_samples(model_path, n=6):
    """Samples whose behaviour log-probs are the initial model's own: mu = pi_prox before the first step."""
    from transformers import AutoModelForCausalLM

    from learner.logprobs import token_logprobs

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(0)
    samples = []
    for i in range(n):
        tokens = torch.randint(5, 4000, (1, 8 + i), generator=generator)
        with torch.no_grad():
            behaviour = token_logprobs(model, tokens, torch.ones_like(tokens), 1.0)[0]
        n_tokens = tokens.shape[1]
        samples.append(Sample(
            sample_id=f"p{i}", role="agent" if i % 2 else "designer", env_id="e", skill="k", arm="hint", step=0,
            tokens=pack_ints(tokens[0].tolist()), loss_mask=pack_mask([0, 0] + [1] * (n_tokens - 2)),
            logprobs=pack_floats([0.0, 0.0] + behaviour[2:].tolist()), versions=pack_ints([-1, -1] + [0] * (n_tokens - 2)),
            reward=0.0, advantage=1.0 if i % 3 else -1.0, temperature=1.0,
        ))
    return samples


def test_mini_batches_reuse_the_proximal_logprobs_from_before_the_first_step(tiny_model_path):
    samples = _on_policy_samples(tiny_model_path)
    trainer = Trainer(tiny_model_path, LearnerConfig(lora_rank=0, learning_rate=3e-2, mini_batches=3, micro_batch_tokens=24))
    metrics = trainer.update(samples)
    assert metrics["optimizer_step"] == 3 and trainer.optimizer_steps == 3 and trainer.updates == 1
    # pi_prox / mu is 1 on every token only if pi_prox was computed before the first step ...
    assert metrics["mismatch_k3"] < 1e-6 and metrics["behaviour_weight_max"] == pytest.approx(1.0, abs=1e-3)
    # ... and the later mini-batches then see pi_theta move away from it, so some tokens clip.
    assert metrics["clip_fraction"] > 0.0


def test_one_mini_batch_is_plain_grpo_on_policy(tiny_model_path):
    samples = _on_policy_samples(tiny_model_path)
    metrics = Trainer(tiny_model_path, LearnerConfig(lora_rank=0, learning_rate=3e-2)).update(samples)
    assert metrics["optimizer_step"] == 1 and metrics["clip_fraction"] == 0.0 and metrics["masked_fraction"] == 0.0
    assert metrics["mismatch_k3"] < 1e-6


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("constant", [0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
        ("linear", [0.5, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0]),
        ("cosine", [0.5, 1.0, 1.0, 0.8535533905932737, 0.5, 0.14644660940672627, 0.0]),
    ],
)
def test_lr_schedules(schedule, expected):
    from learner.trainer import lr_factor

    config = LearnerConfig(lora_rank=0, lr_schedule=schedule, warmup_steps=2, total_steps=6)
    assert [lr_factor(config, step) for step in range(7)] == pytest.approx(expected)  # step 6 is past the end
    assert lr_factor(LearnerConfig(lora_rank=0, lr_schedule="cosine"), 10_000) == 1.0  # total_steps = 0: no decay


def test_learning_rate_is_logged_per_update(tiny_model_path):
    config = LearnerConfig(lora_rank=0, learning_rate=1e-3, lr_schedule="linear", warmup_steps=1, total_steps=3)
    trainer = Trainer(tiny_model_path, config)
    sample = make_sample("agent", [5, 6, 7, 8], 1.0, "a")
    assert [trainer.update([sample])["learning_rate"] for _ in range(3)] == pytest.approx([1e-3, 1e-3, 0.5e-3])


def test_bad_learner_config_is_named():
    """A hand-built LearnerConfig gets the config's own checks (engine.protocol.config_loading.check_learner) before any loading."""
    with pytest.raises(ConfigError, match=r"^learner.mini_batches must be at least 1 \(got 0\)$"):
        Trainer("unused", LearnerConfig(lora_rank=0, mini_batches=0))
    with pytest.raises(ConfigError, match=r"^learner.total_steps \(2\) must exceed learner.warmup_steps \(2\), or be 0 for no decay$"):
        Trainer("unused", LearnerConfig(lora_rank=0, warmup_steps=2, total_steps=2))
    with pytest.raises(ConfigError, match=r"^learner.objective.clip_low must be in \[0, 1\) \(got 1.5\)$"):
        Trainer("unused", LearnerConfig(lora_rank=0, objective=ObjectiveConfig(clip_low=1.5)))


def test_update_logs_what_the_issue_asks_for(tiny_model_path):
    trainer = Trainer(tiny_model_path, LearnerConfig(lora_rank=0, learning_rate=1e-3, micro_batch_tokens=16))
    metrics = trainer.update([make_sample("agent", [5, 6, 7, 8, 9], 1.0, "a1"), make_sample("designer", [1, 2, 3, 4], -1.0, "d1")])
    for name in (
        "loss_agent", "loss_designer", "clip_fraction", "behaviour_weight_mean", "behaviour_weight_max", "masked_fraction",
        "mismatch_k3", "staleness_0", "grad_norm", "learner_tokens_per_s", "learning_rate", "padding_fraction",
    ):
        assert name in metrics, name
    assert metrics["grad_norm"] > 0 and metrics["learner_tokens_per_s"] > 0


def test_publish_replaces_a_version_left_by_an_interrupted_run(tiny_model_path, tmp_path):
    """A run stopped before its next checkpoint leaves policy/v000001; the resumed learner recomputes that
    update and publishes it again in its place."""
    left = tmp_path / "policy" / "v000001"
    left.mkdir(parents=True)
    (left / "partial.bin").write_bytes(b"old")
    trainer = Trainer(tiny_model_path, LearnerConfig(lora_rank=0))
    folder = trainer.publish(tmp_path / "policy", keep=2)
    assert folder == left and (folder / "model.safetensors").exists() and not (folder / "partial.bin").exists()
    assert sorted(p.name for p in (tmp_path / "policy").iterdir()) == ["v000001"]


def _gradients_of_one_update(trainer, samples, sample_norm=0):
    """The gradient the update steps on (before clipping), captured per parameter name."""
    captured = {}
    clip = trainer._clip_gradients

    def capture():
        captured.update({n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None})
        return clip()

    trainer._clip_gradients = capture
    metrics = trainer.update(samples, sample_norm=sample_norm)
    return metrics, captured


def test_the_paper_learner_is_a_per_sample_mean_over_both_roles(tiny_model_path):
    """The paper preset's learner (TIS, sample_mean) on a mixed on-policy batch split into several micro-batches:
    loss and gradient equal (1/N) sum_i -A_i * mean over row i's tokens of exp(logp - logp.detach())."""
    import msgspec
    from transformers import AutoModelForCausalLM

    from engine.protocol.config_loading import load_config
    from learner.logprobs import token_logprobs
    from engine.protocol.messages import unpack_ints, unpack_mask

    samples = _on_policy_samples(tiny_model_path)  # 3 designer + 3 agent samples of 8..13 tokens, A = +-1
    samples = [msgspec.structs.replace(s, advantage=s.advantage * (8.0 if s.role == "designer" else 1.0)) for s in samples]
    config = msgspec.structs.replace(load_config("paper").learner, micro_batch_tokens=24)
    metrics, grads = _gradients_of_one_update(Trainer(tiny_model_path, config), samples)
    assert metrics["optimizer_step"] == 1 and metrics["trained_samples"] == 6

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    total = 0.0
    for s in samples:
        ids = torch.tensor([unpack_ints(s.tokens).tolist()])
        mask = torch.tensor(unpack_mask(s.loss_mask), dtype=torch.float32)
        mask[0] = 0.0
        logp = token_logprobs(model, ids, torch.ones_like(ids), 1.0)[0]
        total = total - s.advantage * ((torch.exp(logp - logp.detach()) * mask).sum() / mask.sum())
    loss = total / len(samples)
    loss.backward()
    assert metrics["loss"] == pytest.approx(float(loss), abs=1e-5)
    assert metrics["loss"] == pytest.approx(-sum(s.advantage for s in samples) / 6, abs=1e-5)
    assert max(float(g.abs().max()) for g in grads.values()) > 1e-2  # far above the tolerance below
    for name, param in model.named_parameters():
        torch.testing.assert_close(grads[name], param.grad, rtol=1e-3, atol=2e-6)  # float32, other summation order


def test_a_zero_advantage_sample_still_gets_its_kl_gradient(tiny_model_path):
    """With kl_coef > 0 a zero-advantage sample runs: its k3 term to the reference has a gradient once the policy
    has moved (at the reference itself that gradient is 0)."""
    trainer = Trainer(tiny_model_path, LearnerConfig(lora_rank=0, objective=ObjectiveConfig(kl_coef=0.5), learning_rate=1e-2))
    trainer.update([make_sample("agent", [5, 6, 7, 8, 9], 1.0, "move")])  # the policy leaves the reference
    metrics, grads = _gradients_of_one_update(trainer, [make_sample("agent", [5, 6, 10, 11, 12], 0.0, "zero")])
    assert metrics["trained_samples"] == 1 and metrics["zero_advantage_samples"] == 1
    assert metrics["kl_ref"] > 0 and metrics["grad_norm"] > 0
    assert any(float(g.abs().sum()) > 0 for g in grads.values())
    without_kl = Trainer(tiny_model_path, LearnerConfig(lora_rank=0, learning_rate=1e-2)).update([make_sample("agent", [5, 6, 10, 11, 12], 0.0, "zero")])
    assert without_kl["trained_samples"] == 0 and without_kl["optimizer_step"] == 0  # no KL: nothing to train


def test_adamw_decays_matrices_and_embeddings_but_not_norms_or_biases(tiny_model_path):
    """Megatron's groups (the reference's optimizer): weight decay off for biases and 1-D parameters."""
    from learner.trainer import param_groups

    trainer = Trainer(tiny_model_path, LearnerConfig(lora_rank=0, weight_decay=0.1))
    decay, no_decay = trainer.optimizer.param_groups
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.1, 0.0)
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    decayed, exempt = {names[id(p)] for p in decay["params"]}, {names[id(p)] for p in no_decay["params"]}
    assert "model.embed_tokens.weight" in decayed and "model.layers.0.self_attn.q_proj.weight" in decayed
    assert {"model.norm.weight", "model.layers.0.input_layernorm.weight", "model.layers.0.self_attn.q_norm.weight"} <= exempt
    assert all(p.ndim == 1 for p in no_decay["params"]) and all(p.ndim == 2 for p in decay["params"])
    assert decayed | exempt == set(names.values()) and not decayed & exempt  # every parameter, once
    bias = torch.nn.Linear(3, 2)  # a bias is exempt by its name as well as by its shape
    groups = param_groups(bias, 0.1)
    assert [[tuple(p.shape) for p in g["params"]] for g in groups] == [[(2, 3)], [(2,)]]
    frozen = torch.nn.LayerNorm(4).requires_grad_(False)
    assert param_groups(frozen, 0.1) == []  # nothing trained, no empty group


def test_a_checkpoint_with_one_parameter_group_resumes_with_the_decay_groups(tiny_model_path, tmp_path, monkeypatch):
    """A checkpoint written before the groups (one group, decay on everything) loads with norms undecayed."""
    import learner.trainer as trainer_module

    config = LearnerConfig(lora_rank=0, learning_rate=1e-3, weight_decay=0.1, lr_schedule="linear", total_steps=10)
    with monkeypatch.context() as patch:
        patch.setattr(trainer_module, "param_groups", lambda model, decay: [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": decay}])
        old = Trainer(tiny_model_path, config)
        assert len(old.optimizer.param_groups) == 1
        old.update([make_sample("agent", [5, 6, 7, 8], 1.0, "a")])
        old.save_checkpoint(tmp_path / "ckpt", step=0)
    new = Trainer(tiny_model_path, config)
    new.load_checkpoint(tmp_path / "ckpt")
    assert [g["weight_decay"] for g in new.optimizer.param_groups] == [0.1, 0.0]
    assert len(new.scheduler.base_lrs) == 2 and new.optimizer.param_groups[1]["lr"] == new.optimizer.param_groups[0]["lr"]
    new.update([make_sample("agent", [5, 6, 7, 8], 1.0, "a")])
    assert new.optimizer.param_groups[0]["lr"] == new.optimizer.param_groups[1]["lr"] == pytest.approx(0.8e-3)


def _lagging(role, versions, advantage, sample_id):
    sample = make_sample(role, [5, 6] + [7 + i for i in range(len(versions))], advantage, sample_id)
    import msgspec

    return msgspec.structs.replace(sample, versions=pack_ints([-1, -1] + versions))


def test_staleness_is_logged_by_role_so_the_designers_lag_does_not_hide_in_the_mean(tiny_model_path):
    trainer = Trainer(tiny_model_path, LearnerConfig(lora_rank=0, learning_rate=1e-3))
    trainer.version = 6  # the version that trains this batch
    metrics = trainer.update([
        _lagging("agent", [6, 6, 5], 1.0, "a1"), _lagging("agent", [6, 6], -1.0, "a2"),
        _lagging("designer", [2, 2, 2, 2], 0.5, "d1"),  # made at the refresh, k = 4 versions ago
    ])
    assert metrics["staleness_agent"] == pytest.approx(1 / 5) and metrics["staleness_agent_max"] == 1.0
    assert metrics["staleness_designer"] == 4.0 and metrics["staleness_designer_max"] == 4.0
    assert metrics["staleness"] == pytest.approx(17 / 9)  # the token mean over both roles, as before
    assert (metrics["staleness_0"], metrics["staleness_1"], metrics["staleness_4"]) == (4.0, 1.0, 4.0)
    agent_only = Trainer(tiny_model_path, LearnerConfig(lora_rank=0)).update([_lagging("agent", [0, 0], 1.0, "a")])
    assert (agent_only["staleness_designer"], agent_only["staleness_designer_max"]) == (0.0, 0.0)


def test_a_flushed_designer_batch_with_sample_norm_weighs_each_sample_as_a_normal_step(tiny_model_path):
    """The final designer-only flush (TrainBatch.sample_norm = N): its gradient equals those samples' contribution
    inside an N-sample batch, here one whose other samples have advantage 0 (counted, with no gradient)."""
    import msgspec

    samples = _on_policy_samples(tiny_model_path)  # p0, p2, p4 designer; p1, p3, p5 agent
    designers = [s for s in samples if s.role == "designer"]
    inside = [s if s.role == "designer" else msgspec.structs.replace(s, advantage=0.0) for s in samples]
    config = LearnerConfig(lora_rank=0, learning_rate=1e-3, micro_batch_tokens=24)
    normal, normal_grads = _gradients_of_one_update(Trainer(tiny_model_path, config), inside)
    unscaled, _ = _gradients_of_one_update(Trainer(tiny_model_path, config), designers)
    trainer = Trainer(tiny_model_path, config)
    flushed, flushed_grads = _gradients_of_one_update(trainer, designers, sample_norm=len(inside))
    assert max(float(g.abs().max()) for g in normal_grads.values()) > 1e-3
    assert flushed["loss"] == pytest.approx(normal["loss"], abs=1e-6)
    for name, grad in normal_grads.items():
        torch.testing.assert_close(flushed_grads[name], grad, rtol=1e-4, atol=1e-7)
    # without it each flushed sample weighed N / n_designer = 2x its weight in a normal step
    assert unscaled["loss"] == pytest.approx(normal["loss"] * len(inside) / len(designers), rel=1e-4)
    with pytest.raises(ValueError, match=r"^sample_norm is 1, fewer than the batch's 3 samples"):
        trainer.update(designers, sample_norm=1)


def test_sample_norm_sets_each_mini_batchs_share_of_the_denominator():
    from learner.packing import plan_mini_batches, unpack

    rows = [unpack(make_sample("designer", [5, 6, 7, 8], 1.0, f"d{i}")) for i in range(3)]
    plan = plan_mini_batches(rows, {0, 1, 2}, mini_batches=2, world_size=1, micro_batch_tokens=64, sample_norm=12)
    assert [m.samples for m in plan] == [8.0, 4.0]  # 2 and 1 samples of a batch standing for 12
    plain = plan_mini_batches(rows, {0, 1, 2}, mini_batches=2, world_size=1, micro_batch_tokens=64)
    assert [m.samples for m in plain] == [2.0, 1.0]


def test_micro_batch_padding_changes_the_passes_not_the_update(tiny_model_path):
    """Samples of very different lengths with prompts outside the loss mask: capping the padding (0: a pass per
    length) gives the same loss, metrics and gradients as one padded micro-batch, in fewer padded positions."""
    import numpy as np

    rng = np.random.default_rng(4)
    samples = []
    for i, length in enumerate((8, 9, 30, 31, 60)):
        prompt = length // 2
        samples.append(Sample(
            sample_id=f"s{i}", role="designer" if i == 4 else "agent", env_id="e", skill="k", arm="hint", step=0,
            tokens=pack_ints(rng.integers(5, 4000, size=length).tolist()), loss_mask=pack_mask([0] * prompt + [1] * (length - prompt)),
            logprobs=pack_floats([0.0] * prompt + (-8.3 + 0.2 * rng.standard_normal(length - prompt)).tolist()),
            versions=pack_ints([-1] * prompt + [0] * (length - prompt)), reward=0.0, advantage=(1.0, -0.5, 0.5, -1.0, 1.0)[i],
        ))
    results = {}
    for padding in (1.0, 0.0):
        torch.manual_seed(0)
        trainer = Trainer(tiny_model_path, LearnerConfig(lora_rank=0, learning_rate=1e-2, micro_batch_padding=padding))
        grads, step = [], trainer.optimizer.step

        def recording_step(*args, step=step, grads=grads, trainer=trainer, **kwargs):
            grads.extend(p.grad.detach().clone() for p in trainer.model.parameters() if p.grad is not None)
            return step(*args, **kwargs)

        trainer.optimizer.step = recording_step
        metrics = trainer.update(samples)
        results[padding] = (metrics, grads)
    (whole, whole_grads), (capped, capped_grads) = results[1.0], results[0.0]
    assert whole["padding_fraction"] > 0.3 and capped["padding_fraction"] == 0.0
    for key in ("loss", "loss_agent", "loss_designer", "grad_norm", "mismatch_k3", "clip_fraction", "trained_tokens", "loss_tokens"):
        assert capped[key] == pytest.approx(whole[key], rel=1e-4, abs=1e-6), key
    assert len(whole_grads) == len(capped_grads) > 0  # (AdamW turns float noise in a near-zero gradient into +-lr: compare gradients)
    for a, b in zip(whole_grads, capped_grads):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
