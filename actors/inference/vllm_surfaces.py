"""The vLLM contract: every vLLM surface the vLLM backend (actors/inference/vllm.py) uses, as data.

tests/actors/inference/test_vllm_contract.py checks each row against the installed vLLM (names and signatures)
and that vllm.py uses nothing without a row; the pyproject `gpu` extra admits only the versions checked.
"""

# Every vLLM surface actors/inference/vllm.py relies on, in one place: (kind, module, name, the names used of it). The contract test
# (tests/actors/inference/test_vllm_contract.py) checks each row against the installed vLLM, and that every vLLM import,
# engine/worker/sampler attribute and VLLM_* variable vllm.py uses has a row: a new call without a row fails there.
# The pyproject `gpu` extra admits only versions where these were checked (the reasons are in its comment).
# kinds:  call    a callable whose signature has these parameters (a class: its constructor's)
#         values  a Literal type alias that admits these values
#         keys    a TypedDict with these keys
#         attrs   a class whose source assigns these instance attributes (`self.<name> =`)
#         member  an attribute that must exist (an enum member, a method of a lazily made object)
#         env     an environment variable vLLM reads (vllm.envs.environment_variables)
VLLM_SURFACES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("call", "vllm", "AsyncEngineArgs", (
        "model", "dtype", "seed", "enable_prefix_caching", "logprobs_mode", "worker_extension_cls", "tensor_parallel_size",
        "gpu_memory_utilization", "kv_cache_memory_bytes", "max_model_len", "enforce_eager", "disable_log_stats",
        "enable_sleep_mode")),
    ("values", "vllm.config.model", "LogprobsMode", ("raw_logprobs",)),
    ("call", "vllm.v1.engine.async_llm", "AsyncLLM.from_engine_args", ("engine_args",)),
    ("call", "vllm.v1.engine.async_llm", "AsyncLLM.generate", ("prompt", "sampling_params", "request_id")),
    ("call", "vllm.v1.engine.async_llm", "AsyncLLM.collective_rpc", ("method", "timeout", "args")),
    ("call", "vllm.v1.engine.async_llm", "AsyncLLM.pause_generation", ("mode", "clear_cache")),
    ("values", "vllm.v1.engine", "PauseMode", ("wait",)),
    ("call", "vllm.v1.engine.async_llm", "AsyncLLM.reset_prefix_cache", ()),
    ("call", "vllm.v1.engine.async_llm", "AsyncLLM.resume_generation", ()),
    ("call", "vllm.v1.engine.async_llm", "AsyncLLM.sleep", ("level",)),  # time-shared GPUs: sleep / wake_up (below)
    ("call", "vllm.v1.engine.async_llm", "AsyncLLM.wake_up", ()),
    ("call", "vllm.v1.engine.async_llm", "AsyncLLM.shutdown", ()),
    ("call", "vllm", "SamplingParams", (
        "temperature", "top_p", "top_k", "max_tokens", "stop_token_ids", "logprobs", "detokenize", "output_kind", "stop",
        "include_stop_str_in_output")),
    ("member", "vllm.sampling_params", "RequestOutputKind.FINAL_ONLY", ()),
    ("keys", "vllm.inputs", "TokensPrompt", ("prompt_token_ids",)),
    ("call", "vllm.outputs", "RequestOutput", ("outputs",)),
    ("call", "vllm.outputs", "CompletionOutput", ("token_ids", "finish_reason", "logprobs")),
    ("call", "vllm.logprobs", "Logprob", ("logprob",)),
    ("member", "vllm.platforms", "current_platform.is_cpu", ()),
    # worker side (SpadeWorkerExtension runs inside vLLM's V1 worker; the CPU worker and runner subclass these)
    ("call", "vllm.v1.worker.gpu_worker", "Worker.reload_weights", ()),  # forwards (*args, **kwargs) to the runner's
    ("call", "vllm.v1.worker.gpu_model_runner", "GPUModelRunner.reload_weights", ("weights_path",)),
    ("attrs", "vllm.v1.worker.gpu_worker", "Worker", ("model_runner",)),
    ("attrs", "vllm.v1.worker.gpu_model_runner", "GPUModelRunner", ("sampler", "model")),
    ("attrs", "vllm.model_executor.layers.vocab_parallel_embedding", "VocabParallelEmbedding", ("quant_method",)),
    ("call", "vllm.model_executor.layers.vocab_parallel_embedding", "UnquantizedEmbeddingMethod.process_weights_after_loading", ("layer",)),
    # the V1 sampler that _LearnerLogprobSampler extends: forward calls self.compute_logprobs(logits) in raw_logprobs mode
    ("call", "vllm.v1.sample.sampler", "Sampler", ("logprobs_mode",)),
    ("attrs", "vllm.v1.sample.sampler", "Sampler", ("logprobs_mode",)),
    ("call", "vllm.v1.sample.sampler", "Sampler.forward", ("logits", "sampling_metadata")),
    ("call", "vllm.v1.sample.sampler", "Sampler.compute_logprobs", ("logits",)),
    ("call", "vllm.v1.sample.metadata", "SamplingMetadata", ("temperature",)),
    ("env", "vllm.envs", "VLLM_USE_V2_MODEL_RUNNER", ()),
    ("env", "vllm.envs", "VLLM_CPU_OMP_THREADS_BIND", ()),
    ("env", "vllm.envs", "VLLM_LOGGING_STREAM", ()),
)
