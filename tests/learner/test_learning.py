"""Must-show: the default objective (decoupled PPO) learns a toy task, on-policy and on samples 2 versions stale.

The toy environment: prompt "Say yes:", sample 2 tokens at temperature 1, reward 1 when the first one is in a
fixed target set. The random tiny model is close to uniform over its 4096 tokens (the likeliest has p ~ 6e-4), so
no single token starts with a 1-10% chance; the target is a seeded random set of 160 ids whose initial
probability mass is ~0.04 (asserted in [0.01, 0.2]). The success rate is that mass under the current policy: the
expected reward, exact rather than sampled. Two groups of 16 samples per update get z-scored advantages; one AdamW step per
batch. Stale mode samples with the weights from 2 updates ago (recording their log-probs as mu) and recomputes
pi_prox with the current weights before the update, as the engine's learner does.

    .venv/bin/python -m pytest -q -s tests/learner/test_learning.py   # -s prints updates and seconds (~10-60 s)
"""

import collections
import copy
import time

import pytest
import torch

from learner.logprobs import logprobs_from_logits
from learner.objectives import ObjectiveConfig, aggregate, token_losses

PROMPT = "Say yes:"
NEW_TOKENS = 2
GROUPS, GROUP_SIZE = 2, 16
TARGETS = 160
LEARNING_RATE = 5e-3
BUDGET = 40  # updates


def load(path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model, AutoTokenizer.from_pretrained(path)


@torch.no_grad()
def success_rate(model, prompt_ids, targets):
    probs = torch.softmax(model(input_ids=torch.tensor([prompt_ids])).logits[0, -1].float(), dim=-1)
    return float(probs[targets].sum())


@torch.no_grad()
def sample(model, prompt_ids, n, generator):
    """n continuations at temperature 1, with the sampler's log-prob of each new token (mu)."""
    ids = torch.tensor([prompt_ids] * n)
    behaviour = []
    for _ in range(NEW_TOKENS):
        logp = torch.log_softmax(model(input_ids=ids).logits[:, -1].float(), dim=-1)
        token = torch.multinomial(logp.exp(), 1, generator=generator)
        behaviour.append(logp.gather(-1, token))
        ids = torch.cat([ids, token], dim=1)
    return ids, torch.cat(behaviour, dim=1)


def group_advantages(rewards):
    grouped = rewards.view(GROUPS, GROUP_SIZE)
    z = (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, unbiased=False, keepdim=True) + 1e-6)
    return z.reshape(-1, 1)


def train(model_path, staleness, seed=0):
    torch.manual_seed(seed)
    model, tokenizer = load(model_path)
    model.train()
    sampler = copy.deepcopy(model).eval()
    generator = torch.Generator().manual_seed(seed)
    prompt_ids = tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    special = set(tokenizer.all_special_ids)
    candidates = [i for i in torch.randperm(len(tokenizer), generator=generator).tolist() if i not in special]
    targets = torch.tensor(candidates[:TARGETS])
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    cfg = ObjectiveConfig()  # the default: decoupled PPO
    history = collections.deque([copy.deepcopy(model.state_dict())], maxlen=staleness + 1)
    n, start = len(prompt_ids), len(prompt_ids)
    rates, stats_log = [success_rate(model, prompt_ids, targets)], []
    for _ in range(BUDGET):
        sampler.load_state_dict(history[0])  # the oldest kept weights: min(updates so far, staleness) behind
        ids, mu = sample(sampler, prompt_ids, GROUPS * GROUP_SIZE, generator)
        rewards = torch.isin(ids[:, start], targets).float()
        mask = torch.zeros(ids.shape, dtype=torch.bool)
        mask[:, n:] = True
        behaviour = torch.zeros(ids.shape)
        behaviour[:, n:] = mu
        with torch.no_grad():  # pi_prox: the learner's recomputation with the weights before this update
            proximal = logprobs_from_logits(model(input_ids=ids).logits, ids, 1.0)
        logprobs = logprobs_from_logits(model(input_ids=ids).logits, ids, 1.0)
        losses, kept, stats = token_losses(cfg, logprobs, proximal, behaviour, group_advantages(rewards), mask)
        loss = aggregate(losses, kept, ["agent"] * len(ids), {"agent": 1.0})
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        history.append(copy.deepcopy(model.state_dict()))
        rates.append(success_rate(model, prompt_ids, targets))
        stats_log.append({k: float(v) for k, v in stats.items()})
        if rates[-1] > 0.9:
            break
    return rates, stats_log


@pytest.mark.parametrize("staleness", [0, 2])
def test_default_objective_learns_the_toy_task(tiny_model_path, staleness):
    started = time.perf_counter()
    rates, stats = train(tiny_model_path, staleness)
    seconds = time.perf_counter() - started
    summary = (
        f"staleness {staleness}: success {rates[0]:.3f} -> {rates[-1]:.3f} in {len(rates) - 1} updates, {seconds:.1f} s; "
        f"max mismatch_k3 {max(s['mismatch_k3'] for s in stats):.2e}, max behaviour weight "
        f"{max(s['behaviour_weight_max'] for s in stats):.2f}, max masked fraction {max(s['masked_fraction'] for s in stats):.3f}"
    )
    print(summary)
    assert 0.01 < rates[0] < 0.2, summary
    assert rates[-1] > 0.9, summary
    if staleness == 0:
        assert max(s["mismatch_k3"] for s in stats) < 1e-5, summary  # mu = pi_prox up to float rounding
    else:
        assert max(s["mismatch_k3"] for s in stats) > 1e-3, summary  # the samples really were off-policy
