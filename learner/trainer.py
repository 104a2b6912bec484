"""One GRPO update from a batch of samples, publishing the new policy, checkpoints; on one process or N (FSDP2).

    trainer = Trainer(model_path, config.learner, seed=0)          # or distributed=init_distributed(...)
    metrics = trainer.update(samples)        # `mini_batches` optimizer steps; returns what to log
    path = trainer.publish(policy_dir, keep) # version += 1, written atomically (tmp folder + rename)
    trainer.save_checkpoint(folder, step); trainer.load_checkpoint(folder)   # learner/checkpoint.py

With `learner.lora_rank > 0` the model is wrapped in a peft LoRA adapter (on `lora_targets`); only the adapter
is trained, and `publish` writes only the adapter (adapter_config.json + adapter_model.safetensors, which names
the base model folder), which the workers apply to the base model they hold (actors/inference/hf.py). The KL
reference is then the same model with the adapter disabled. LoRA runs on one process only.

Dtypes (`dtype`, the run's `model.dtype`; learner/precision.py): the trained parameters and AdamW's state are
always fp32 (master weights); `bfloat16` computes under bf16 autocast (and FSDP2 gathers in bf16) and publishes
bf16 versions, each checked against the learner's log-probs before it goes out (learner/cast_check.py, the gap in
the metrics); `float32` computes and publishes in fp32. Checkpoints keep fp32. Frozen weights (the KL reference,
LoRA's base) are held in `dtype`.

The objective is the `[learner.objective]` table (learner/objectives.py). Aggregation (`learner.loss_aggregation`):
sample_mean, each sample's token mean weighted by its role's weight (`designer_weight` / `agent_weight`), then the
mean over every sample of the mini-batch, both roles together (the reference; `sample_norm` replaces the batch's
count, so the engine's designer-only final flush weighs each sample as a normal step does); or role_token_mean, a token mean
within each role over every sampled token of that role, the role losses summed with those weights. Zero-advantage
samples count in every denominator; they skip the forward pass unless there is a KL term (kl_coef > 0), the only
part of their loss with a gradient. The batch is cut into `mini_batches` strided mini-batches (sample i goes to
i mod M), one optimizer step each; mini-batch 0 runs before any step, so its proximal log-probs are its own detached
log-probs, and those of the later mini-batches are recomputed without gradient before the first step.

The logged `staleness` (token mean of trained tokens' version lag) comes with `staleness_agent`,
`staleness_designer` and their `_max`: a designer sample is k versions late by design. AdamW decays every trained
parameter of 2 or more dimensions, not biases or 1-D ones (`param_groups`, as Megatron).

On N processes every rank holds the whole batch (rank 0 broadcasts it, learner/train.py), computes the same plan
(learner/packing.py), and runs its share of each mini-batch in micro-batches of at most
`micro_batch_tokens` padded tokens; ranks with fewer micro-batches run empty ones, since every FSDP forward and
backward is a collective. Role token counts come from the whole mini-batch, and FSDP sums the gradients, so
the update equals the single-process one up to floating-point summation order.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

from engine.protocol.config import LearnerConfig
from engine.protocol.config_loading import check_learner
from engine.protocol.messages import Sample
from learner import cast_check, checkpoint, guards, precision
from learner.distributed import Distributed, load_model, resolve_device, shard_model
from learner.logprobs import sequence_logprobs
from learner.objectives import aggregate, token_losses
from learner.packing import ROLES, Batch, MiniBatch, Row, collate, plan_mini_batches, unpack
# Summed over micro-batches and ranks, then turned into the logged means (one all-reduce per update).
_SUMS = ("loss", "loss_agent", "loss_designer", "clip", "weight", "masked", "k3", "kl", "tokens", "kept")


def lr_factor(config: LearnerConfig, step: int) -> float:
    """The learning-rate multiplier for optimizer step `step` (0-based): linear warm-up, then the schedule.

    Warm-up climbs (step + 1) / warmup_steps; "cosine" and "linear" then fall to 0 at `total_steps`
    (0: no decay); "constant" stays at 1.
    """
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.lr_schedule == "constant" or config.total_steps <= 0:
        return 1.0
    progress = min(1.0, (step - config.warmup_steps) / (config.total_steps - config.warmup_steps))
    if config.lr_schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0 - progress


def param_groups(model, weight_decay: float) -> list[dict]:
    """AdamW's parameter groups as Megatron makes them (the reference's optimizer): `weight_decay` on every trained
    parameter of 2 or more dimensions (the embeddings too, which Megatron decays), none on biases and 1-D
    parameters (norm scales), whose decay only pulls a norm's gain towards 0. An empty group is left out."""
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            (no_decay if name.endswith(".bias") or parameter.ndim <= 1 else decay).append(parameter)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def _wrap_lora(model, config: LearnerConfig):
    """The model as a peft LoRA model: only the adapter's parameters require grad (B starts at 0: pi = base)."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
        target_modules=list(config.lora_targets), bias="none", task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


class _AdapterDisabled:
    """The KL reference under LoRA: calls the policy's base model (adapter disabled, no gradient needed)."""

    def __init__(self, model):
        self.model = model

    def __call__(self, *args, **kwargs):
        with self.model.disable_adapter():
            return self.model(*args, **kwargs)

    def parameters(self):
        return iter(())


class Trainer:
    def __init__(
        self,
        model_path: str,
        config: LearnerConfig,
        *,
        seed: int = 0,
        dtype: str = "float32",
        distributed: Distributed | None = None,
    ):
        from transformers import AutoTokenizer

        check_learner(config)  # ConfigError; a config read from a run's config.toml has passed it already
        self.config = config
        self.dist = distributed or Distributed(device_type=resolve_device(config.device))
        self.device = self.dist.device
        torch.manual_seed(seed)
        self.lora = config.lora_rank > 0
        self.model_path, self.dtype = model_path, dtype  # dtype: model.dtype, the published and compute dtype
        compute = precision.compute_dtype(dtype, self.device)  # None: fp32
        frozen = precision.torch_dtype(dtype)  # the KL reference and LoRA's base never take an update
        if self.lora and self.dist.world_size > 1:
            raise NotImplementedError(
                f"learner.lora_rank > 0 runs on one process only (learner.world_size is {self.dist.world_size}): "
                "set learner.world_size = 1 or learner.lora_rank = 0"
            )
        model = load_model(model_path, self.dist, dtype=frozen if self.lora else torch.float32)  # rank 0 reads it once
        if config.activation_checkpointing:  # each decoder layer recomputed in backward (learner/memory_plan.py)
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if self.lora:
            model = _wrap_lora(model, config)
        precision.require_fp32_masters(model)
        model.train()
        offload = config.cpu_offload == "on"  # fp32 state in host RAM (learner/distributed.py); "auto" is up's to resolve
        self.model = shard_model(model, self.dist, compute_dtype=compute, cpu_offload=offload)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.optimizer = torch.optim.AdamW(
            param_groups(self.model, config.weight_decay), lr=config.learning_rate, betas=tuple(config.betas),
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: lr_factor(config, step))
        self.reference = None
        if config.objective.kl_coef > 0 and self.lora:  # the base model: the policy with its adapter disabled
            self.reference = _AdapterDisabled(self.model)
        elif config.objective.kl_coef > 0:  # a frozen copy of the initial model for the KL term
            reference = load_model(model_path, self.dist, dtype=frozen).eval()
            reference.requires_grad_(False)
            self.reference = shard_model(reference, self.dist, frozen=True, compute_dtype=compute, cpu_offload=offload)
        # model.dtype bfloat16: bf16 autocast, on CUDA and CPU (fp32 master weights and log-softmax); float32: plain fp32.
        self.autocast = compute is not None
        self.probe = None  # what the next publish's cast check scores (learner/cast_check.py)
        self.cast_check: dict[str, float] = {}  # the last publish's log-prob gap; {} for float32
        self.version = 0  # published policy versions
        self.updates = 0  # update() calls that took at least one optimizer step
        self.optimizer_steps = 0
        self.skipped_nonfinite = 0  # optimizer steps skipped for a non-finite loss or gradient

    # ------------------------------------------------------------------ the update
    def update(self, samples: list[Sample], *, sample_norm: int = 0) -> dict[str, float]:
        """One update. `sample_norm` > 0 (`TrainBatch.sample_norm`) is the sample count sample_mean divides by instead
        of the batch's own: the engine's final designer-only flush gives each sample its weight in a normal step."""
        started = time.perf_counter()
        if 0 < sample_norm < len(samples):
            raise ValueError(f"sample_norm is {sample_norm}, fewer than the batch's {len(samples)} samples: "
                             f"send 0 (the batch's count) or at least {len(samples)}")
        objective = self.config.objective
        rows = [unpack(s) for s in samples]
        with_kl = self.reference is not None  # a zero-advantage sample's KL term still has a gradient
        trainable = [i for i, r in enumerate(rows) if r.mask.any() and (r.advantage != 0.0 or with_kl)]
        self.probe = cast_check.probe_from_rows(rows, trainable) or self.probe
        plan = plan_mini_batches(rows, set(trainable), mini_batches=self.config.mini_batches, world_size=self.dist.world_size,
                                 micro_batch_tokens=self.config.micro_batch_tokens, sample_norm=sample_norm,
                                 micro_batch_padding=self.config.micro_batch_padding)
        weights = {"agent": self.config.agent_weight, "designer": self.config.designer_weight}
        proximal = self._proximal_logprobs(rows, plan) if len(plan) > 1 else {}
        # Statistics stay on the device until the end of the update: one transfer, no sync per micro-batch.
        sums = torch.zeros(len(_SUMS), dtype=torch.float64, device=self.device)
        weight_max = torch.zeros(1, dtype=torch.float64, device=self.device)
        grad_norms, lr = [], self.optimizer.param_groups[0]["lr"]
        for number, mini in enumerate(plan):
            if not mini.trainable:
                continue
            mine = mini.micro[self.dist.rank]
            before = sums.clone()  # a skipped step's statistics leave the update's again
            for index in range(mini.passes):
                if index >= len(mine):
                    self._empty_pass(backward=True)
                    continue
                batch = collate(rows, mine[index], self.device)
                logprobs = self._logprobs(self.model, batch)
                prox = logprobs.detach() if number == 0 else self._gather_proximal(proximal, mine[index], batch)
                ref = None
                if self.reference is not None:
                    with torch.no_grad():
                        ref = self._logprobs(self.reference, batch)
                losses, kept, stats = token_losses(objective, logprobs, prox, batch.behaviour, batch.advantages, batch.mask, ref)
                reduce = self._reducer(batch, mini)
                loss = reduce(losses, kept, weights)
                loss.backward()
                with torch.no_grad():
                    sums += self._micro_sums(loss, losses, kept, stats, batch.roles, weights, reduce)
                    weight_max = torch.maximum(weight_max, stats["behaviour_weight_max"].double())
            lr = self.optimizer.param_groups[0]["lr"]
            norm = self._step(sums[0] - before[0])
            if math.isfinite(norm):
                grad_norms.append(norm)
            else:
                sums.copy_(before)
        if grad_norms:
            self.updates += 1
        self.dist.all_reduce_(sums)
        self.dist.all_reduce_(weight_max, op="max")
        seconds = time.perf_counter() - started
        skipped = {"skipped_nonfinite": float(len([m for m in plan if m.trainable]) - len(grad_norms))}
        return self._metrics(rows, trainable, plan, dict(zip(_SUMS, sums.tolist())), float(weight_max), grad_norms, lr, seconds) | skipped

    def _reducer(self, batch: Batch, mini: MiniBatch):
        """The micro-batch's share of its mini-batch's loss, `learner.loss_aggregation` over the whole mini-batch."""
        mode, row_tokens = self.config.loss_aggregation, batch.mask.sum(-1)

        def reduce(losses: torch.Tensor, kept: torch.Tensor, weights: dict[str, float]) -> torch.Tensor:
            return aggregate(losses, kept, batch.roles, weights, role_tokens=mini.role_tokens, mode=mode, row_tokens=row_tokens, samples=mini.samples)

        return reduce

    @staticmethod
    def _micro_sums(loss, losses, kept, stats, roles, weights, reduce) -> torch.Tensor:
        """This micro-batch's share of `_SUMS`: means weighted by their token counts, so they add up."""
        per_role = []
        for role in ROLES:
            only = {r: (w if r == role else 0.0) for r, w in weights.items()}
            per_role.append(reduce(losses, kept, only) if role in roles else loss.new_zeros(()))
        tokens, kept_tokens = stats["tokens"], stats["kept_tokens"]
        return torch.stack([
            loss.detach(), *per_role,
            stats["clip_fraction"] * kept_tokens,
            stats["behaviour_weight_mean"] * tokens,
            stats["masked_fraction"] * tokens,
            stats["mismatch_k3"] * tokens,
            stats["kl_ref"] * kept_tokens,
            tokens, kept_tokens,
        ]).double()

    @torch.no_grad()
    def _proximal_logprobs(self, rows: list[Row], plan: list[MiniBatch]) -> dict[int, torch.Tensor]:
        """log pi_prox of every trainable sample of mini-batches 1.. (weights before the first step), by sample."""
        proximal: dict[int, torch.Tensor] = {}
        for mini in plan[1:]:
            mine = mini.micro[self.dist.rank]
            for index in range(mini.passes):
                if index >= len(mine):
                    self._empty_pass(backward=False)
                    continue
                batch = collate(rows, mine[index], self.device)
                logprobs = self._logprobs(self.model, batch)
                for row, (sample, n) in enumerate(zip(mine[index], batch.lengths)):
                    proximal[sample] = logprobs[row, :n].clone()
        return proximal

    def _gather_proximal(self, proximal: dict[int, torch.Tensor], micro: list[int], batch: Batch) -> torch.Tensor:
        out = torch.zeros_like(batch.mask)
        for row, (sample, n) in enumerate(zip(micro, batch.lengths)):
            out[row, :n] = proximal[sample]
        return out

    def _forward(self, model, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        context = torch.autocast(self.device.type, dtype=torch.bfloat16) if self.autocast else contextlib.nullcontext()
        with context:
            return model(input_ids=ids, attention_mask=attention, use_cache=False).logits

    def _logprobs(self, model, batch: Batch) -> torch.Tensor:
        """Log-probs at the loss mask's positions (0 elsewhere: no loss, statistic or pi_prox reads them), so the
        vocabulary projection skips the prompt and padding positions."""
        return sequence_logprobs(model, batch.ids, batch.attention, batch.temperatures, autocast=self.autocast, positions=batch.mask > 0)

    def _empty_pass(self, *, backward: bool) -> None:
        """A one-token pass with zero loss: keeps this rank in step with ranks that have another micro-batch."""
        ids = torch.zeros((1, 1), dtype=torch.long, device=self.device)
        with contextlib.nullcontext() if backward else torch.no_grad():
            logits = self._forward(self.model, ids, torch.ones_like(ids))
            if self.reference is not None and backward:
                with torch.no_grad():
                    self._forward(self.reference, ids, torch.ones_like(ids))
            if backward:
                (logits.float().sum() * 0.0).backward()

    def _clip_gradients(self) -> float:
        """Scale the gradients to norm <= max_grad_norm; returns the norm before clipping.

        Squares are summed in float64 (a float32 norm of a 1M-element tensor is off by ~1e-4 on CPU) over this
        rank's shards, then over ranks: the same total for any number of processes.
        """
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]  # FSDP: this rank's shards
        squares = torch.zeros(1, dtype=torch.float64, device=self.device)
        for g in local:
            squares += torch.linalg.vector_norm(g, dtype=torch.float64).square()
        total = math.sqrt(float(self.dist.all_reduce_(squares)))
        scale = self.config.max_grad_norm / (total + 1e-6)
        if scale < 1.0 and local:
            torch._foreach_mul_(local, scale)
        return total

    def _step(self, loss: torch.Tensor | None = None) -> float:
        grad_norm = self._clip_gradients()
        if loss is not None:  # NaN on every rank when the loss is not finite on one (0 * inf is NaN)
            grad_norm += float(self.dist.all_reduce_(loss.detach().double().reshape(1) * 0.0))
        if not math.isfinite(grad_norm):  # no step: nothing non-finite reaches the weights (learner/guards.py)
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped_nonfinite += 1
            print(f"learner: skipped an optimizer step: its loss or gradient is not finite (grad norm {grad_norm})", file=sys.stderr, flush=True)
            return grad_norm
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer_steps += 1
        return grad_norm

    def _metrics(self, rows, trainable, plan, sums, weight_max, grad_norms, lr, seconds) -> dict[str, float]:
        steps = len(grad_norms)
        tokens, kept = sums["tokens"], sums["kept"]
        trained_tokens = sum(rows[i].length for i in trainable)
        padded = sum(len(m) * max(rows[i].length for i in m) for mini in plan for rank in mini.micro for m in rank)
        histogram: dict[int, int] = {}
        lags_by_role: dict[str, list[np.ndarray]] = {role: [] for role in ROLES}
        for i in trainable:
            lags = self.version - rows[i].versions[rows[i].mask > 0]
            lags_by_role[rows[i].role].append(lags)
            for value, n in zip(*np.unique(lags, return_counts=True)):
                histogram[int(value)] = histogram.get(int(value), 0) + int(n)
        # By role too: a designer sample is k versions late by design, which would hide in (and inflate) the token mean.
        every = np.concatenate([lag for role in ROLES for lag in lags_by_role[role]] or [np.zeros(0)])
        by_role = {}
        for role in ROLES:
            lags = np.concatenate(lags_by_role[role] or [np.zeros(0)])
            by_role[f"staleness_{role}"] = float(lags.mean()) if lags.size else 0.0
            by_role[f"staleness_{role}_max"] = float(lags.max()) if lags.size else 0.0
        return {
            # losses: the mean over this update's optimizer steps of each step's objective
            "loss": sums["loss"] / max(steps, 1),
            "loss_agent": sums["loss_agent"] / max(steps, 1),
            "loss_designer": sums["loss_designer"] / max(steps, 1),
            "clip_fraction": sums["clip"] / kept if kept else 0.0,
            "behaviour_weight_mean": sums["weight"] / tokens if tokens else 0.0,
            "behaviour_weight_max": weight_max,
            "masked_fraction": sums["masked"] / tokens if tokens else 0.0,
            "mismatch_k3": sums["k3"] / tokens if tokens else 0.0,
            "kl_ref": sums["kl"] / kept if kept else 0.0,
            "staleness": float(every.mean()) if every.size else 0.0,
            **by_role,
            **{f"staleness_{lag}": float(n) for lag, n in sorted(histogram.items())},
            "grad_norm": sum(grad_norms) / steps if steps else 0.0,
            "grad_norm_max": max(grad_norms, default=0.0),
            "learning_rate": float(lr),
            "samples": float(len(rows)),
            "trained_samples": float(len(trainable)),
            "zero_advantage_samples": float(sum(1 for r in rows if r.advantage == 0.0)),
            "trained_tokens": float(trained_tokens),
            "loss_tokens": float(tokens),
            "padding_fraction": 1.0 - trained_tokens / padded if padded else 0.0,
            "learner_seconds": seconds,
            "learner_tokens_per_s": trained_tokens / seconds if seconds > 0 else 0.0,
            "optimizer_step": float(steps),
            "world_size": float(self.dist.world_size),
        }

    # ------------------------------------------------------------------ publishing and checkpoints
    def publish(self, policy_dir: Path, keep: int) -> Path:
        """Write the current weights as policy version `version + 1` in `model.dtype` and return its folder (every
        rank calls it). Under bfloat16 the folder is checked before it is published (`self.cast_check`)."""
        guards.check_publishable(self)  # NonFiniteWeights rather than a NaN policy
        self.version += 1
        final = Path(policy_dir) / f"v{self.version:06d}"
        tmp = final.with_name(f".tmp-v{self.version:06d}")
        weights = None if self.lora else checkpoint.full_model_state_dict(self)  # a collective under FSDP
        if self.dist.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
            if self.lora:
                checkpoint.save_adapter_folder(self, tmp)
            else:
                checkpoint.save_model_folder(self, tmp, weights, dtype=self.dtype)
        self.cast_check = cast_check.cast_gap(self, tmp)  # CastGapTooLarge before anything is published
        if self.dist.is_main:
            if final.exists():  # published by a run that stopped before its next checkpoint; recomputed bit-for-bit
                stale = final.with_name(f".stale-v{self.version:06d}")
                shutil.rmtree(stale, ignore_errors=True)
                final.rename(stale)
                tmp.rename(final)
                shutil.rmtree(stale, ignore_errors=True)
            else:
                tmp.rename(final)
            published = sorted(p for p in Path(policy_dir).glob("v*") if p.is_dir())
            for old in published[:-keep] if keep > 0 else []:
                shutil.rmtree(old, ignore_errors=True)
        return final

    def save_checkpoint(self, folder: Path, step: int) -> Path:
        """A resumable checkpoint (learner/checkpoint.py); every rank calls it."""
        return checkpoint.save_checkpoint(self, Path(folder), step)

    def load_checkpoint(self, folder: Path) -> int:
        """Restore a checkpoint written by `save_checkpoint`; returns its step."""
        step = checkpoint.load_checkpoint(self, Path(folder))
        # A checkpoint from before `param_groups` holds one group, whose settings torch copies onto the last group
        # only: each group's decay is the config's again, and every group follows the one schedule.
        for group, wanted in zip(self.optimizer.param_groups, param_groups(self.model, self.config.weight_decay)):
            group["weight_decay"] = wanted["weight_decay"]
        groups = len(self.optimizer.param_groups)
        if len(self.scheduler.base_lrs) != groups:
            self.scheduler.base_lrs = self.scheduler.base_lrs[:1] * groups
            for group in self.optimizer.param_groups:
                group["lr"] = self.optimizer.param_groups[0]["lr"]
        return step
