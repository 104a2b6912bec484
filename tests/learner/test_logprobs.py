"""Must-show: the behaviour log-probs recorded by the inference backend equal the learner's recomputation."""

import pytest
import torch

from actors.inference.base import GenerationRequest
from actors.inference.hf import TransformersBackend
from engine.protocol.messages import Sample
from learner.logprobs import token_logprobs
from engine.protocol.messages import pack_floats, pack_ints, pack_mask


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
    from engine.protocol.config import LearnerConfig
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
    trainer = Trainer(tiny_model_path, LearnerConfig(lora_rank=0, learning_rate=1e-3))
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    metrics = trainer.update([sample])
    assert metrics["mismatch_k3"] < 1e-6
    assert abs(metrics["behaviour_weight_mean"] - 1.0) < 1e-4
    assert metrics["optimizer_step"] == 1.0
    changed = any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    assert changed


# ---------------------------------------------------------------- the chunked head (learner/logprobs.py)
def _head_case(vocab: int, n: int = 96, dim: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, dim, generator=g, requires_grad=True)
    weight = (torch.randn(vocab, dim, generator=g) * 0.5).requires_grad_(True)
    bias = (torch.randn(vocab, generator=g) * 0.1).requires_grad_(True)
    targets = torch.randint(0, vocab, (n,), generator=g)
    temperatures = torch.rand(n, generator=g) + 0.3
    return hidden, weight, bias, targets, temperatures


def _plain(hidden, weight, bias, targets, temperatures):
    logits = (hidden @ weight.T + bias) / temperatures[:, None]
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)


def test_tiled_logprobs_and_gradients_equal_the_plain_computation():
    from learner.logprobs import chunked_logprobs

    hidden, weight, bias, targets, temperatures = _head_case(vocab=1000)
    upstream = torch.randn(hidden.shape[0])
    expected = _plain(hidden, weight, bias, targets, temperatures)
    expected_grads = torch.autograd.grad((expected * upstream).sum(), (hidden, weight, bias))
    tiled = chunked_logprobs(hidden, weight, bias, targets, temperatures, max_logit_elements=0, tile=(17, 129))
    grads = torch.autograd.grad((tiled * upstream).sum(), (hidden, weight, bias))
    assert torch.allclose(tiled, expected, atol=1e-5, rtol=0)
    for got, want in zip(grads, expected_grads):
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


class _LargestTensor(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the largest tensor any op produces (forward and backward), parameter-shaped ones aside."""

    def __init__(self, skip_shapes):
        super().__init__()
        self.skip, self.largest = {tuple(s) for s in skip_shapes}, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and tuple(t.shape) not in self.skip:
                self.largest = max(self.largest, t.numel() * t.element_size())
        return out


def _largest_intermediate(vocab: int, **kwargs) -> int:
    from learner.logprobs import chunked_logprobs

    hidden, weight, bias, targets, temperatures = _head_case(vocab=vocab, n=256)
    with _LargestTensor([weight.shape, bias.shape]) as probe:
        chunked_logprobs(hidden, weight, bias, targets, temperatures, **kwargs).sum().backward()
    return probe.largest


def test_tiled_head_memory_stays_flat_as_the_vocabulary_grows():
    """Every intermediate of the tiled head (forward and backward) is at most one tile, for a vocabulary 64x
    larger; the one-piece computation grows with the vocabulary. Parameter-sized gradients are not counted."""
    tiled = [_largest_intermediate(v, max_logit_elements=0, tile=(64, 1024)) for v in (4096, 65536, 262144)]
    plain = [_largest_intermediate(v, max_logit_elements=1 << 40) for v in (4096, 65536)]
    assert tiled[0] == tiled[1] == tiled[2] <= 64 * 1024 * 4, tiled
    assert plain[1] >= 16 * plain[0] and plain[1] > 100 * tiled[2], plain


def test_sequence_logprobs_equal_token_logprobs_on_the_model(tiny_model_path):
    from transformers import AutoModelForCausalLM

    from learner.logprobs import sequence_logprobs

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    ids = torch.randint(5, 4000, (3, 40), generator=torch.Generator().manual_seed(1))
    attention = torch.ones_like(ids)
    attention[2, 30:] = 0
    temperatures = torch.tensor([1.0, 0.6, 0.3])
    expected = torch.cat([token_logprobs(model, ids[i : i + 1], attention[i : i + 1], float(t)) for i, t in enumerate(temperatures)])
    for budget in (1 << 40, 0):  # one piece, and tiles
        got = sequence_logprobs(model, ids, attention, temperatures.view(-1, 1, 1), max_logit_elements=budget, tile=(16, 1000))
        assert torch.allclose(got, expected, atol=1e-5, rtol=0), budget
    loss = sequence_logprobs(model, ids, attention, temperatures, max_logit_elements=0, tile=(16, 1000)).sum()
    loss.backward()
    assert model.get_output_embeddings().weight.grad is not None


def test_micro_batches_refuse_a_sample_longer_than_the_budget(capsys):
    from learner.packing import micro_batches

    assert micro_batches([0, 1, 2], [10, 50, 20], max_tokens=40) == [[0, 2]]
    assert "a sample of 50 tokens is longer than learner.micro_batch_tokens = 40" in capsys.readouterr().err


def test_sequence_logprobs_at_chosen_positions_equal_the_full_computation(tiny_model_path):
    """With `positions`, the head runs only there: those entries and their gradients are the full computation's,
    every other entry is 0."""
    from transformers import AutoModelForCausalLM

    from learner.logprobs import sequence_logprobs

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    ids = torch.randint(5, 4000, (3, 40), generator=torch.Generator().manual_seed(2))
    attention = torch.ones_like(ids)
    attention[2, 30:] = 0
    positions = torch.zeros_like(ids, dtype=torch.bool)
    positions[0, 20:] = True
    positions[1, 35:38] = True
    positions[2, 5:30] = True
    temperatures = torch.tensor([1.0, 0.6, 0.3]).view(-1, 1, 1)
    upstream = torch.randn(ids.shape, generator=torch.Generator().manual_seed(3)) * positions
    head = model.get_output_embeddings().weight
    full = sequence_logprobs(model, ids, attention, temperatures)
    (want_head,) = torch.autograd.grad((full * upstream).sum(), (head,))
    for budget in (1 << 40, 0):  # one piece, and tiles
        some = sequence_logprobs(model, ids, attention, temperatures, positions=positions, max_logit_elements=budget, tile=(16, 1000))
        assert torch.allclose(some[positions], full[positions].detach(), atol=1e-5, rtol=0), budget
        assert (some[~positions] == 0).all()
        (got_head,) = torch.autograd.grad((some * upstream).sum(), (head,))
        assert torch.allclose(got_head, want_head, atol=1e-5, rtol=1e-4), budget
    with pytest.raises(ValueError, match="positions"):
        sequence_logprobs(model, ids, attention, positions=positions[:, :10])


def test_micro_batches_keep_padding_within_max_padding():
    """Rows of very different lengths go to separate micro-batches once padding would pass `max_padding` of the
    padded size; without the cap only the token budget splits them."""
    from learner.packing import micro_batches

    lengths = [100, 104, 110, 300, 310, 1000]
    assert micro_batches(list(range(6)), lengths, max_tokens=10_000) == [[0, 1, 2, 3, 4, 5]]
    capped = micro_batches(list(range(6)), lengths, max_tokens=10_000, max_padding=0.1)
    assert capped == [[0, 1, 2], [3, 4], [5]]
    for micro in capped:
        padded = max(lengths[i] for i in micro) * len(micro)
        assert padded - sum(lengths[i] for i in micro) <= 0.1 * padded
    assert micro_batches(list(range(6)), lengths, max_tokens=10_000, max_padding=0.0) == [[0], [1], [2], [3], [4], [5]]
