"""Learner benchmark: training tokens/s through `Trainer.update` against a bare transformers training step.

    .venv/bin/python bin/benchmarks/learner.py [--hidden 256 --layers 4 --rows 16 --length 256 --rounds 5]
    (or bin/bench learner)

The model is a random Qwen3 built at run time (learner/tiny_model.py; default the tests' tiny model: hidden 256,
4 layers, vocab 4096, 4.2M parameters, where the vocabulary projection and its log-softmax are a large share of
the work, so overhead in the log-prob path shows). The batch: `rows` sequences of `length` tokens, the first half
of each a prompt (loss-masked), mixed roles, non-zero advantages, agents sampled at temperature 0.6 as the
engine does. Measured in the same run, in alternating rounds so both see the same load (warm-up 1, then the
mean of `rounds`):
  (a) `Trainer.update` with the default learner config (decoupled PPO, micro-batches of 2048 tokens, grad
      clipping, AdamW) on one process;
  (b) bare: one transformers forward of the whole batch, masked cross-entropy weighted by the advantage,
      backward, AdamW step; nothing else.
Tokens/s counts every token of every sequence (prompt included), the same for both. Ends with one JSON line
whose `ratio` is (a)/(b) (target 0.85).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from engine.protocol.config import LearnerConfig  # noqa: E402
from engine.protocol.messages import Sample  # noqa: E402
from learner.tiny_model import build_tiny_model  # noqa: E402
from learner.trainer import Trainer  # noqa: E402
from engine.protocol.messages import pack_floats, pack_ints, pack_mask  # noqa: E402

TARGET = 0.85


def make_batch(rows: int, length: int, vocab: int, seed: int = 0) -> list[Sample]:
    rng = np.random.default_rng(seed)
    prompt = length // 2
    samples = []
    for i in range(rows):
        role = "designer" if i % 4 == 0 else "agent"
        completion = length - prompt
        samples.append(Sample(
            sample_id=f"b{i}", role=role, env_id="e", skill="k", arm="design" if role == "designer" else "hint", step=0,
            tokens=pack_ints(rng.integers(5, vocab, size=length).tolist()),
            loss_mask=pack_mask([0] * prompt + [1] * completion),
            logprobs=pack_floats([0.0] * prompt + (-8.3 + 0.3 * rng.standard_normal(completion)).tolist()),
            versions=pack_ints([-1] * prompt + [0] * completion),
            reward=float(i % 2), advantage=1.0 if i % 2 else -1.0, temperature=0.6 if role == "agent" else 1.0,
        ))
    return samples


class BareStep:
    """The floor: forward, masked advantage-weighted cross-entropy, backward, AdamW; one batch, no extras."""

    def __init__(self, model_path: Path, config: LearnerConfig, samples: list[Sample]):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.model.train()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=config.learning_rate, betas=tuple(config.betas), weight_decay=config.weight_decay
        )
        self.ids = torch.tensor(np.stack([np.frombuffer(s.tokens, dtype="<i4") for s in samples]).astype(np.int64))
        mask = torch.tensor(np.stack([np.frombuffer(s.loss_mask, dtype=np.uint8) for s in samples]).astype(np.float32))
        self.weights = (mask * torch.tensor([[s.advantage] for s in samples]))[:, 1:]
        self.count = mask[:, 1:].sum()

    def step(self) -> int:
        logits = self.model(input_ids=self.ids, use_cache=False).logits[:, :-1]
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), self.ids[:, 1:].reshape(-1), reduction="none")
        loss = (nll.view_as(self.weights) * self.weights).sum() / self.count
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return self.ids.numel()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0: all cores")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    config = LearnerConfig(learning_rate=1e-6, device="cpu")
    with tempfile.TemporaryDirectory(prefix="spade-bench-learner-") as tmp:
        started = time.perf_counter()
        model_path = build_tiny_model(Path(tmp) / "model", hidden=args.hidden, layers=args.layers)
        trainer = Trainer(str(model_path), config)
        samples = make_batch(args.rows, args.length, trainer.model.config.vocab_size)
        bare = BareStep(model_path, config, samples)
        parameters = sum(p.numel() for p in trainer.model.parameters())
        print(
            f"model: random Qwen3, hidden {args.hidden}, {args.layers} layers, vocab {trainer.model.config.vocab_size}, "
            f"{parameters / 1e6:.1f}M parameters; batch {args.rows} x {args.length} tokens (half loss-masked); "
            f"{torch.get_num_threads()} threads; set up in {time.perf_counter() - started:.1f} s"
        )
        learner_s, bare_s, last = [], [], {}
        for round_ in range(args.rounds + 1):  # round 0 is the warm-up
            t0 = time.perf_counter()
            last = trainer.update(samples)
            t1 = time.perf_counter()
            tokens = bare.step()
            t2 = time.perf_counter()
            if round_ > 0:
                learner_s.append(t1 - t0)
                bare_s.append(t2 - t1)
            print(f"round {round_}{' (warm-up)' if round_ == 0 else ''}: learner {t1 - t0:.3f} s, bare {t2 - t1:.3f} s")
    tokens = args.rows * args.length
    assert last["trained_tokens"] == tokens
    learner_tps = tokens / statistics.mean(learner_s)
    bare_tps = tokens / statistics.mean(bare_s)
    ratio = learner_tps / bare_tps
    print(f"(a) Trainer.update: {learner_tps:,.0f} tokens/s ({last['padding_fraction']:.1%} padding in micro-batches)")
    print(f"(b) bare step:      {bare_tps:,.0f} tokens/s")
    print(f"(a)/(b): {ratio:.3f} (target {TARGET}); load average {os.getloadavg()[0]:.2f}")
    print(json.dumps({
        "bench": "learner", "ratio": round(ratio, 3), "target": TARGET,
        "learner_tokens_per_s": round(learner_tps, 1), "bare_tokens_per_s": round(bare_tps, 1),
        "model": f"qwen3-h{args.hidden}-l{args.layers}", "parameters": parameters, "rows": args.rows, "length": args.length,
        "rounds": args.rounds, "threads": torch.get_num_threads(),
        "learner_s": [round(s, 4) for s in learner_s], "bare_s": [round(s, 4) for s in bare_s],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
