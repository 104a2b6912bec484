"""Must-show: each objective against hand arithmetic, the on-policy reduction to plain GRPO, a gradient check."""

import math

import pytest
import torch

from engine.protocol.config import Config, LearnerConfig
from engine.protocol.config_loading import ConfigError, check_config
from learner.logprobs import logprobs_from_logits
from learner.objectives import ObjectiveConfig, aggregate, effective_mask, k3, k3_clamped, plain_grpo_loss, token_losses

EPS_LOW, EPS_HIGH = 0.2, 0.28


def clip(r):
    return min(max(r, 1 - EPS_LOW), 1 + EPS_HIGH)


def surrogate(logp, prox, adv):
    r = math.exp(logp - prox)
    return min(r * adv, clip(r) * adv)


def t(rows, dtype=torch.float32):
    return torch.tensor(rows, dtype=dtype)


def single_role_loss(cfg, logp, prox, mu, adv, mask, ref=None):
    losses, kept, stats = token_losses(cfg, logp, prox, mu, adv, mask, ref)
    return aggregate(losses, kept, ["agent"] * logp.shape[0], {"agent": 1.0}), kept, stats


# Four sampled tokens and one padding position (mask 0), shared by the per-objective tests.
#            a      b      c      d      pad
LOGP = [-1.0, -0.5, -2.0, -0.3, 0.0]  # pi_theta
PROX = [-1.1, -1.0, -1.5, -0.2, 0.0]  # pi_prox
MU = [-1.2, -0.9, -1.4, -2.0, -9.0]  # behaviour; pad would have k = e^9 if it counted
ADV = [1.0, 1.0, -2.0, 1.0, 1.0]
MASK = [1, 1, 1, 1, 0]
# a: r = e^0.1 inside the clip range, k = e^0.1;  b: r = e^0.5 > 1.28, clipped, k = e^-0.1;
# c: r = e^-0.5 < 0.8 with A < 0, clipped, k = e^-0.1;  d: r = e^-0.1, k = e^1.8 = 6.05 (> 5: out of decoupled/icepop).


def leaf(values):
    return t([values]).requires_grad_(True)


def test_decoupled_ppo_masks_tokens_whose_behaviour_weight_exceeds_5():
    logp = leaf(LOGP)
    loss, kept, stats = single_role_loss(ObjectiveConfig(), logp, t([PROX]), t([MU]), t([ADV]), t([MASK]))
    k = [math.exp(PROX[i] - MU[i]) for i in range(4)]
    assert k[3] > 5.0
    expected = -(k[0] * surrogate(-1.0, -1.1, 1.0) + k[1] * surrogate(-0.5, -1.0, 1.0) + k[2] * surrogate(-2.0, -1.5, -2.0)) / 3
    assert expected == pytest.approx(-(math.exp(0.1) * math.exp(0.1) + math.exp(-0.1) * 1.28 + math.exp(-0.1) * 0.8 * -2.0) / 3)
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert kept.tolist() == [[True, True, True, False, False]]
    loss.backward()
    # Only token a is unclipped: d/dlogp of -(1/3) k r A is -(1/3) k r A; clipped and masked tokens get 0.
    assert logp.grad[0].tolist() == pytest.approx([-(1 / 3) * math.exp(0.1) * math.exp(0.1), 0.0, 0.0, 0.0, 0.0], abs=1e-6)
    assert float(stats["clip_fraction"]) == pytest.approx(2 / 3)
    assert float(stats["masked_fraction"]) == pytest.approx(1 / 4)
    assert float(stats["behaviour_weight_max"]) == pytest.approx(math.exp(1.8), rel=1e-6)
    assert float(stats["behaviour_weight_mean"]) == pytest.approx(sum(k) / 4, rel=1e-6)
    assert float(stats["mismatch_k3"]) == pytest.approx(sum(x - math.log(x) - 1 for x in k) / 4, rel=1e-5)
    assert float(stats["tokens"]) == 4.0 and float(stats["kept_tokens"]) == 3.0


def test_tis_caps_the_weight_at_2_and_keeps_every_token():
    logp = leaf(LOGP)
    loss, kept, stats = single_role_loss(ObjectiveConfig(name="tis"), logp, t([PROX]), t([MU]), t([ADV]), t([MASK]))
    w = [min(math.exp(PROX[i] - MU[i]), 2.0) for i in range(4)]
    assert w[3] == 2.0
    terms = [w[i] * surrogate(LOGP[i], PROX[i], ADV[i]) for i in range(4)]
    assert float(loss) == pytest.approx(-sum(terms) / 4, rel=1e-6)
    assert kept.tolist() == [[True, True, True, True, False]]
    loss.backward()
    # Tokens a and d are unclipped (d: r = e^-0.1 with A > 0): gradient -(1/4) w r A.
    assert logp.grad[0, 3].item() == pytest.approx(-(1 / 4) * 2.0 * math.exp(-0.1), rel=1e-6)
    assert float(stats["masked_fraction"]) == 0.0
    assert float(stats["clip_fraction"]) == pytest.approx(2 / 4)


def test_icepop_zeroes_tokens_outside_its_band():
    # Token b's behaviour moves so that k = e^-0.8 = 0.449 < 0.5; token d has k = 6.05 > 5: both leave M.
    mu = list(MU)
    mu[1] = -0.2
    logp = leaf(LOGP)
    loss, kept, stats = single_role_loss(ObjectiveConfig(name="icepop"), logp, t([PROX]), t([mu]), t([ADV]), t([MASK]))
    assert math.exp(PROX[1] - mu[1]) < 0.5
    expected = -(math.exp(0.1) * surrogate(-1.0, -1.1, 1.0) + math.exp(-0.1) * surrogate(-2.0, -1.5, -2.0)) / 2
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert kept.tolist() == [[True, False, True, False, False]]
    assert float(stats["masked_fraction"]) == pytest.approx(2 / 4)
    # The band is inclusive: with [1, 1] only the token with k exactly 1 stays.
    point = ObjectiveConfig(name="icepop", icepop_low=1.0, icepop_high=1.0)
    assert effective_mask(point, t([[-1.5, -0.5, -2.0]]), t([[-1.5, -0.25, -2.5]]), t([[1, 1, 1]])).tolist() == [[True, False, False]]


def test_sequence_filter_rejects_a_whole_sequence_outside_the_band():
    # Row 0: log k = [0.004, -0.002, 0.001] -> geometric mean e^0.001 inside [0.99, 1.01]: kept.
    # Row 1: log k = [0.03, 0.0, 0.0]       -> e^0.01 = 1.01005 > 1.01: the whole row leaves M.
    # Row 2: log k = [-0.02, 0.0, 0.0]      -> e^-0.00667 = 0.99336 inside: kept.
    # Every token-level k is within 3% of 1, so only the filter can drop anything.
    prox = [[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]
    mu = [[-1.004, -0.998, -1.001], [-1.03, -1.0, -1.0], [-0.98, -1.0, -1.0]]
    logp = [[-0.9, -1.1, -1.0], [-0.9, -1.0, -1.0], [-1.0, -1.0, -1.2]]
    adv = [[1.0], [1.0], [-1.0]]
    mask = [[1, 1, 1], [1, 1, 1], [1, 1, 1]]
    assert math.exp(0.03 / 3) > 1.01 and 0.99 < math.exp(-0.02 / 3) < 1.01
    cfg = ObjectiveConfig(seq_filter=True)
    loss, kept, stats = single_role_loss(cfg, t(logp, torch.float64), t(prox, torch.float64), t(mu, torch.float64), t(adv, torch.float64), t(mask))
    assert kept.tolist() == [[True] * 3, [False] * 3, [True] * 3]
    terms = [
        math.exp(prox[i][j] - mu[i][j]) * surrogate(logp[i][j], prox[i][j], adv[i][0]) for i in (0, 2) for j in range(3)
    ]
    assert float(loss) == pytest.approx(-sum(terms) / 6, rel=1e-9)
    assert float(stats["masked_fraction"]) == pytest.approx(3 / 9)
    # The same batch without the filter keeps every token; a narrower band ([0.995, 1.005]) rejects row 2 too.
    assert effective_mask(ObjectiveConfig(), t(prox), t(mu), t(mask)).all()
    narrow = ObjectiveConfig(seq_filter=True, seq_low=0.995, seq_high=1.005)
    assert effective_mask(narrow, t(prox, torch.float64), t(mu, torch.float64), t(mask)).tolist() == [[True] * 3, [False] * 3, [False] * 3]


def test_the_kl_term_is_clamped_to_ten_as_slime_and_verl_clamp_it():
    ratio = t([3.0, -3.0, 0.5, 50.0])
    assert float(k3(ratio)[0]) == pytest.approx(math.exp(3) - 3 - 1, rel=1e-6)  # 16.09 unclamped
    assert k3_clamped(ratio).tolist() == pytest.approx([10.0, math.exp(-3) + 3 - 1, math.exp(0.5) - 0.5 - 1, 10.0], rel=1e-6)
    # in the loss: pi_ref / pi_theta = e^3 on one token gives kl_coef * 10, and no gradient from the KL past the bound
    logp = leaf([-4.0])
    loss, _, stats = single_role_loss(ObjectiveConfig(kl_coef=0.1), logp, t([[-4.0]]), t([[-4.0]]), t([[0.0]]), t([[1]]), t([[-1.0]]))
    assert float(loss) == pytest.approx(1.0, rel=1e-6) and float(stats["kl_ref"]) == pytest.approx(10.0)
    loss.backward()
    assert logp.grad.tolist() == [[0.0]]


def test_kl_to_reference_adds_k3_with_ratio_ref_over_theta():
    # On-policy tokens (r = k = 1) so the surrogate is plain -A; the KL adds 0.1 * (q - log q - 1), q = pi_ref / pi_theta.
    logp_values, ref_values, adv = [-1.0, -2.0, -0.5], [-1.5, -1.0, -0.5], 0.5
    logp = leaf(logp_values)
    cfg = ObjectiveConfig(kl_coef=0.1)
    loss, _, stats = single_role_loss(cfg, logp, t([logp_values]), t([logp_values]), t([[adv]]), t([[1, 1, 1]]), t([ref_values]))
    q = [math.exp(ref_values[i] - logp_values[i]) for i in range(3)]
    kl = [x - math.log(x) - 1 for x in q]
    assert kl[2] == 0.0 and kl[0] > 0 and kl[1] > 0
    assert float(loss) == pytest.approx(sum(-adv + 0.1 * kl[i] for i in range(3)) / 3, rel=1e-6)
    assert float(stats["kl_ref"]) == pytest.approx(sum(kl) / 3, rel=1e-6)
    loss.backward()
    # d/dlogp [-A r + c (q - log q - 1)] at r = 1 is -A + c (1 - q).
    assert logp.grad[0].tolist() == pytest.approx([(-adv + 0.1 * (1 - q[i])) / 3 for i in range(3)], rel=1e-5)


def test_aggregate_is_a_token_mean_per_role_then_a_weighted_sum():
    losses = t([[1.0, 2.0, 3.0], [10.0, 20.0, 0.0], [5.0, 0.0, 0.0]])
    mask = t([[1, 1, 1], [1, 1, 0], [1, 0, 0]]).bool()
    roles = ["agent", "designer", "agent"]
    # agent: (1 + 2 + 3 + 5) / 4 tokens; designer: (10 + 20) / 2 tokens.
    expected = 1.0 * (1 + 2 + 3 + 5) / 4 + 0.5 * (10 + 20) / 2
    assert float(aggregate(losses, mask, roles, {"agent": 1.0, "designer": 0.5})) == pytest.approx(expected)
    # Whole-batch counts replace the micro-batch's own (this micro-batch holds part of 8 agent and 6 designer tokens).
    split = aggregate(losses, mask, roles, {"agent": 1.0, "designer": 0.5}, role_tokens={"agent": 8, "designer": 6})
    assert float(split) == pytest.approx(11 / 8 + 0.5 * 30 / 6)
    # A role with no rows contributes nothing; an unweighted role is an error.
    assert float(aggregate(losses, mask, ["agent"] * 3, {"agent": 1.0, "designer": 0.5})) == pytest.approx((6 + 30 + 5) / 6)
    with pytest.raises(ValueError, match=r"^roles \['hint'\] have no weight in role_weights \(known: agent, designer\)$"):
        aggregate(losses, mask, ["agent", "hint", "agent"], {"agent": 1.0, "designer": 0.5})


def test_bad_configuration_and_missing_reference_are_rejected():
    # The ranges are the config's checks (every one has a case in tests/engine/protocol/test_config.py).
    def check(**fields):
        check_config(Config(learner=LearnerConfig(lora_rank=0, objective=ObjectiveConfig(**fields))))

    with pytest.raises(ConfigError, match=r"^learner\.objective\.name must be one of decoupled_ppo, tis, icepop \(got 'gspo'\)$"):
        check(name="gspo")
    with pytest.raises(ConfigError, match=r"^learner\.objective\.icepop_low \(5.0\) must not exceed learner\.objective\.icepop_high \(0.5\)$"):
        check(icepop_low=5.0, icepop_high=0.5)
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match=r"^kl_coef is 0.1 but no ref_logprobs were given"):
        token_losses(ObjectiveConfig(kl_coef=0.1), x, x, x, x, x)
    with pytest.raises(ValueError, match=r"must all have the same \[batch, seq\] shape$"):
        token_losses(ObjectiveConfig(), x, x, torch.zeros(1, 3), x, x)


ON_POLICY_CONFIGS = {
    "decoupled_ppo": ObjectiveConfig(),
    "tis": ObjectiveConfig(name="tis"),
    "icepop": ObjectiveConfig(name="icepop"),
    "decoupled_ppo+seq_filter": ObjectiveConfig(seq_filter=True),
    "icepop+seq_filter": ObjectiveConfig(name="icepop", seq_filter=True),
    "tis+kl_to_itself": ObjectiveConfig(name="tis", kl_coef=0.5),
}


@pytest.mark.parametrize("name", list(ON_POLICY_CONFIGS))
def test_on_policy_every_objective_equals_plain_grpo_in_value_and_gradient(name):
    cfg = ON_POLICY_CONFIGS[name]
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 11, (4, 7), generator=gen)
    mask = torch.ones(4, 7)
    mask[:, 0] = 0
    mask[1, 5:] = 0  # a shorter sequence
    advantages = torch.randn(4, 1, generator=gen)
    base = torch.randn(4, 7, 11, generator=gen)

    def grad_of(loss_fn):
        logits = base.clone().requires_grad_(True)
        logp = logprobs_from_logits(logits, ids, 1.0)
        loss = loss_fn(logp)
        loss.backward()
        return loss.detach(), logits.grad

    def objective(logp):
        now = logp.detach()  # mu = pi_prox = pi_theta at the start of the step
        ref = now if cfg.kl_coef > 0 else None
        return single_role_loss(cfg, logp, now, now.clone(), advantages, mask, ref)[0]

    loss, grad = grad_of(objective)
    reference_loss, reference_grad = grad_of(lambda logp: plain_grpo_loss(logp, advantages, mask))
    assert torch.allclose(loss, reference_loss, atol=1e-7)
    assert torch.allclose(grad, reference_grad, atol=1e-7)
    assert float(reference_grad.abs().max()) > 1e-3


def logprobs64(logits, ids):
    """Token log-probs in float64 (the shared `logprobs_from_logits` computes in float32, too coarse here)."""
    picked = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.nn.functional.pad(picked, (1, 0))


def test_decoupled_ppo_gradient_matches_finite_differences_in_float64():
    gen = torch.Generator().manual_seed(1)
    batch, seq, vocab = 3, 6, 5
    ids = torch.randint(0, vocab, (batch, seq), generator=gen)
    mask = torch.ones(batch, seq, dtype=torch.bool)
    mask[:, 0] = False
    mask[2, 4:] = False
    base = torch.randn(batch, seq, vocab, generator=gen, dtype=torch.float64)
    # Off-policy: pi_prox from perturbed logits, mu from a further perturbation, and one token with k = e^2 > 5
    # (masked out: the mask depends only on constants, so it is the same on both sides of every difference).
    proximal = logprobs64(base + 0.3 * torch.randn(base.shape, generator=gen, dtype=torch.float64), ids)
    behaviour = proximal + 0.4 * torch.randn(batch, seq, generator=gen, dtype=torch.float64)
    behaviour[1, 3] = proximal[1, 3] - 2.0
    advantages = torch.randn(batch, 1, generator=gen, dtype=torch.float64)
    cfg = ObjectiveConfig()
    assert int(effective_mask(cfg, proximal, behaviour, mask).sum()) == int(mask.sum()) - 1
    logits = base.clone().requires_grad_(True)
    ratio = torch.exp(logprobs64(logits, ids) - proximal).detach()[mask]
    # Away from the kinks: no ratio within 1e-3 of a clip bound, and both sides of the clip are exercised.
    assert ((ratio - 0.8).abs().min() > 1e-3) and ((ratio - 1.28).abs().min() > 1e-3)
    assert bool(((ratio < 0.8) | (ratio > 1.28)).any()) and bool(((ratio > 0.8) & (ratio < 1.28)).any())

    def loss_of(x):
        losses, kept, _ = token_losses(cfg, logprobs64(x, ids), proximal, behaviour, advantages, mask)
        return aggregate(losses, kept, ["agent", "designer", "agent"], {"agent": 1.0, "designer": 0.7})

    assert torch.autograd.gradcheck(loss_of, (logits,), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_the_paper_presets_aggregation_is_the_references_per_sample_mean_by_hand():
    """Two designer samples (one skill, raw rewards 0.8 and 0.3, the reference's scale 32 = min(192/24*4, 50)) and
    three agent samples, on-policy under TIS (cap 2): the loss is (1/5) sum_i mean_t(-A_i) and d loss / d logp of
    row i's tokens is -A_i / (n_i * 5), both roles together."""
    from engine.protocol.config import RewardConfig
    from engine.protocol.config_loading import load_config
    from engine.rewards import designer_advantages, designer_scale

    learner = load_config("paper").learner
    assert (learner.loss_aggregation, learner.objective.name, learner.objective.tis_cap) == ("sample_mean", "tis", 2.0)
    scale = designer_scale(RewardConfig(), agent_samples=192, designer_samples=24, k=4)
    assert scale == 32.0
    d1, d2 = designer_advantages(["Logic", "Logic"], [0.8, 0.3], scale)
    assert (d1, d2) == pytest.approx((8.0, -8.0))
    roles = ["designer", "designer", "agent", "agent", "agent"]
    advantages = torch.tensor([[d1], [d2], [1.0], [-1.0], [0.5]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 0, 0, 1], [0, 0, 0, 1, 1], [0, 1, 1, 1, 1], [0, 0, 1, 1, 1]], dtype=torch.float32)
    logp = torch.full((5, 5), -1.2, requires_grad=True)
    losses, kept, _ = token_losses(learner.objective, logp, logp.detach(), logp.detach(), advantages, mask)
    weights = {"agent": learner.agent_weight, "designer": learner.designer_weight}
    loss = aggregate(losses, kept, roles, weights, mode=learner.loss_aggregation, row_tokens=mask.sum(-1))
    loss.backward()
    assert float(loss) == pytest.approx((-8.0 + 8.0 - 1.0 + 1.0 - 0.5) / 5)
    expected = torch.tensor([-8.0 / 5, 8.0 / 1, -1.0 / 2, 1.0 / 4, -0.5 / 3]).unsqueeze(-1) / 5 * mask
    torch.testing.assert_close(logp.grad, expected)
    # the project's per-role token mean gives the one-token designer sample 8x the weight of a token of the first
    role_mean = aggregate(losses, kept, roles, weights, mode="role_token_mean")
    assert float(role_mean) == pytest.approx((-8.0 * 5 + 8.0) / 6 + (-1.0 * 2 + 1.0 * 4 - 0.5 * 3) / 9)
    # split into micro-batches, with the whole batch's denominators, the per-sample mean adds up to the same
    parts = [aggregate(losses[rows], kept[rows], [roles[i] for i in rows], weights, mode="sample_mean", row_tokens=mask[rows].sum(-1), samples=5)
             for rows in ([0, 3], [1, 2, 4])]
    assert float(sum(parts)) == pytest.approx(float(loss))


def test_tis_weights_an_off_policy_token_by_its_capped_ratio_in_the_per_sample_mean():
    cfg = ObjectiveConfig(name="tis", tis_cap=2.0)
    logp = torch.zeros(1, 2, requires_grad=True)
    behaviour = torch.tensor([[-math.log(3.0), 0.0]])  # pi_prox / mu = 3 on token 0 (capped at 2), 1 on token 1
    losses, kept, _ = token_losses(cfg, logp, logp.detach(), behaviour, torch.tensor([[1.0]]), torch.ones(1, 2))
    loss = aggregate(losses, kept, ["agent"], {"agent": 1.0}, mode="sample_mean")
    loss.backward()
    assert float(loss) == pytest.approx(-(2.0 + 1.0) / 2)
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, -0.5]]))
