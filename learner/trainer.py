"""One GRPO update from a batch of samples, and publishing the new policy.

    trainer = Trainer(model_path, config.learner, seed=0)
    metrics = trainer.update(samples)        # one optimizer step; returns what to log
    path = trainer.publish(policy_dir)       # version += 1, written atomically (tmp folder + rename)

The objective is chosen by `learner.objective` (learner/objectives.py). Aggregation: token mean within each role
(over every sampled token of that role in the batch, including those of zero-advantage samples, which are skipped
in the forward pass since they contribute no gradient), role losses weighted by `designer_weight` / `agent_weight`. Micro-batches of at most `micro_batch_tokens` tokens accumulate
gradients; the single optimizer step means pi_old is the current policy.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import torch

from engine.config import LearnerConfig
from engine.messages import Sample
from learner.logprobs import logprobs_from_logits
from learner.objectives import ObjectiveConfig, aggregate, token_losses
from storage.records import unpack_floats, unpack_ints, unpack_mask


def _micro_batches(samples: list[Sample], max_tokens: int) -> list[list[Sample]]:
    batches, current, width = [], [], 0
    for sample in sorted(samples, key=lambda s: len(s.tokens)):
        n = len(sample.tokens) // 4
        if current and max(width, n) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, width = [], 0
        current.append(sample)
        width = max(width, n)
    if current:
        batches.append(current)
    return batches


class Trainer:
    def __init__(self, model_path: str, config: LearnerConfig, *, seed: int = 0, dtype: str = "float32"):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.manual_seed(seed)
        self.config = config
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype))
        self.model.train()
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=config.learning_rate,
            betas=tuple(config.betas),
            weight_decay=config.weight_decay,
        )
        self.reference = None
        if config.kl_coef > 0:  # a frozen copy of the initial model for the KL term
            self.reference = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype)).eval()
            self.reference.requires_grad_(False)
        self.version = 0
        self.updates = 0

    def objective(self) -> ObjectiveConfig:
        c = self.config
        return ObjectiveConfig(
            name=c.objective, clip_low=c.clip_low, clip_high=c.clip_high, behaviour_cap=c.behaviour_cap, tis_cap=c.tis_cap,
            icepop_low=c.icepop_low, icepop_high=c.icepop_high, seq_filter=c.seq_filter, seq_low=c.seq_low,
            seq_high=c.seq_high, kl_coef=c.kl_coef,
        )

    def update(self, samples: list[Sample]) -> dict[str, float]:
        started = time.perf_counter()
        objective = self.objective()
        role_tokens = {"agent": 0, "designer": 0}
        for sample in samples:
            role_tokens[sample.role] += int(unpack_mask(sample.loss_mask)[1:].sum())
        trainable = [s for s in samples if s.advantage != 0.0 and unpack_mask(s.loss_mask)[1:].any()]
        weights = {"agent": self.config.agent_weight, "designer": self.config.designer_weight}
        totals = {"loss": 0.0, "loss_agent": 0.0, "loss_designer": 0.0}
        sums = {"clip_fraction": 0.0, "behaviour_weight_mean": 0.0, "masked_fraction": 0.0, "mismatch_k3": 0.0, "kl_ref": 0.0, "staleness": 0.0}
        weight_max = 0.0
        counted = trained_tokens = 0
        staleness_histogram: dict[int, int] = {}
        for micro in _micro_batches(trainable, self.config.micro_batch_tokens):
            width = max(len(s.tokens) // 4 for s in micro)
            ids = torch.zeros((len(micro), width), dtype=torch.long)
            attention = torch.zeros((len(micro), width), dtype=torch.long)
            mask = torch.zeros((len(micro), width))
            behaviour = torch.zeros((len(micro), width))
            versions = torch.full((len(micro), width), -1, dtype=torch.long)
            advantages = torch.zeros((len(micro), 1))
            temperatures = torch.ones((len(micro), 1, 1))
            for row, s in enumerate(micro):
                n = len(s.tokens) // 4
                ids[row, :n] = torch.from_numpy(unpack_ints(s.tokens).astype(np.int64))
                attention[row, :n] = 1
                mask[row, :n] = torch.from_numpy(unpack_mask(s.loss_mask).astype(np.float32))
                behaviour[row, :n] = torch.from_numpy(unpack_floats(s.logprobs).copy())
                versions[row, :n] = torch.from_numpy(unpack_ints(s.versions).astype(np.int64))
                advantages[row, 0] = s.advantage
                temperatures[row] = s.temperature if s.temperature > 0 else 1.0
            mask[:, 0] = 0.0  # the first token has no prediction
            logits = self.model(input_ids=ids, attention_mask=attention, use_cache=False).logits
            logprobs = logprobs_from_logits(logits / temperatures, ids, 1.0)
            ref = None
            if self.reference is not None:
                with torch.no_grad():
                    ref_logits = self.reference(input_ids=ids, attention_mask=attention, use_cache=False).logits
                    ref = logprobs_from_logits(ref_logits / temperatures, ids, 1.0)
            # One optimizer step per batch: the proximal policy is the current one.
            losses, kept, stats = token_losses(objective, logprobs, logprobs.detach(), behaviour, advantages, mask, ref)
            roles = [s.role for s in micro]
            loss = aggregate(losses, kept, roles, weights, role_tokens=role_tokens)
            loss.backward()
            with torch.no_grad():
                totals["loss"] += float(loss)
                for role in ("agent", "designer"):
                    if role in roles:
                        only = {r: (w if r == role else 0.0) for r, w in weights.items()}
                        totals[f"loss_{role}"] += float(aggregate(losses, kept, roles, only, role_tokens=role_tokens))
                n_tokens = float(stats["tokens"])
                counted += n_tokens
                trained_tokens += int(attention.sum())
                for name in sums:
                    if name != "staleness":
                        sums[name] += float(stats[name]) * n_tokens
                weight_max = max(weight_max, float(stats["behaviour_weight_max"]))
                sampled = versions[mask.bool()]
                lag = (self.version - sampled).tolist()
                sums["staleness"] += float(sum(lag))
                for value in lag:
                    staleness_histogram[int(value)] = staleness_histogram.get(int(value), 0) + 1
        grad_norm = 0.0
        if trainable:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm))
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.updates += 1
        seconds = time.perf_counter() - started
        return {
            **totals,
            **{k: (v / counted if counted else 0.0) for k, v in sums.items()},
            "behaviour_weight_max": weight_max,
            **{f"staleness_{lag}": float(n) for lag, n in sorted(staleness_histogram.items())},
            "grad_norm": grad_norm,
            "samples": float(len(samples)),
            "trained_samples": float(len(trainable)),
            "zero_advantage_samples": float(len(samples) - len(trainable)),
            "trained_tokens": float(trained_tokens),
            "learner_seconds": seconds,
            "learner_tokens_per_s": trained_tokens / seconds if seconds > 0 else 0.0,
            "optimizer_step": 1.0 if trainable else 0.0,
        }

    def publish(self, policy_dir: Path, keep: int) -> Path:
        """Write the current weights as policy version `version + 1` and return its folder."""
        self.version += 1
        final = policy_dir / f"v{self.version:06d}"
        tmp = policy_dir / f".tmp-v{self.version:06d}"
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save_pretrained(tmp, safe_serialization=True)
        self.tokenizer.save_pretrained(tmp)
        tmp.rename(final)
        published = sorted(p for p in policy_dir.glob("v*") if p.is_dir())
        for old in published[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def save_checkpoint(self, folder: Path, step: int) -> Path:
        tmp = folder.with_name(f".tmp-{folder.name}")
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save_pretrained(tmp, safe_serialization=True)
        self.tokenizer.save_pretrained(tmp)
        torch.save(
            {
                "optimizer": self.optimizer.state_dict(),
                "version": self.version,
                "updates": self.updates,
                "step": step,
                "torch_rng": torch.get_rng_state(),
            },
            tmp / "trainer_state.pt",
        )
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
        return folder
