"""Which inference backend a config names, and the backend built (each imported lazily, so torch and vLLM load
only in the process that generates).

    kind = backend_kind(config)                    # "vllm" | "transformers" | "scripted" | "timed"; "auto" resolved
    backend = build_backend(config, model_path)    # the worker's (and eval's) backend, on the configured device

The backends import the interface (actors/inference/base.py); this module imports them: it sits above both.
"""

from __future__ import annotations

from actors.inference.base import InferenceBackend
from engine.protocol.errors import InputError

INSTALL_GPU = "pip install -e '.[gpu]'"


class AutoNeedsVLLM(InputError, RuntimeError):
    """inference.backend = "auto" on a GPU machine where vLLM does not import: a refusal, not a slow fallback."""


def backend_kind(config) -> str:
    """The backend `config.inference.backend` names, with "auto" resolved: vLLM where it imports (a LoRA adapter is
    merged into full weights for it: actors/inference/adapter_merge.py), else transformers on a CPU machine. On a
    machine with a GPU, where the transformers backend would generate on it (inference.device not "cpu"), "auto"
    without vLLM is refused (AutoNeedsVLLM): it is almost always a missing or broken GPU install, and generating
    with transformers instead is many times slower; `inference.backend = "transformers"` asks for that explicitly."""
    kind = config.inference.backend
    if kind == "auto":
        kind = "vllm" if _vllm_imports(config.inference) else "transformers"
    return kind


def build_backend(config, model_path: str, *, sleep_mode: bool = False) -> InferenceBackend:
    """The backend named by `config.inference.backend` (imports torch / vLLM lazily). `sleep_mode`: it will be put to
    sleep while the learner updates (the time-shared placement; vLLM must be started with it)."""
    kind = backend_kind(config)
    if kind == "transformers":
        from actors.inference.hf import TransformersBackend, inference_device

        return TransformersBackend(model_path, dtype=config.model.dtype, seed=config.run.seed, device=inference_device(config.inference))
    if kind == "scripted":
        from actors.inference.scripted import ScriptedBackend

        return ScriptedBackend(model_path, config.inference.script, seed=config.run.seed)
    if kind == "timed":
        from actors.inference.timed import TimedBackend

        i = config.inference
        return TimedBackend(
            model_path, seconds_per_token=i.timed_seconds_per_token, median_tokens=i.timed_median_tokens,
            sigma=i.timed_sigma, max_tokens=i.timed_max_tokens, seed=config.run.seed, capacity=i.timed_capacity,
        )
    if kind == "vllm":
        from actors.inference.vllm import VLLMBackend, require_vllm

        require_vllm()  # a one-line error naming the install command
        return VLLMBackend(model_path, config.inference, dtype=config.model.dtype, seed=config.run.seed, sleep_mode=sleep_mode)
    raise ValueError(f"unknown inference backend {kind!r}")


def _vllm_imports(inference) -> bool:
    """Whether vLLM imports here (the "auto" backend's choice). Where it does not: on a GPU machine AutoNeedsVLLM
    (backend_kind says why); on a CPU machine False, with a line saying why when an install is there but broken."""
    import importlib
    import importlib.util

    try:
        importlib.import_module("vllm")
    except Exception as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if _gpu_would_generate(inference):
            raise AutoNeedsVLLM(
                f"inference.backend = 'auto' on a machine with a GPU needs vLLM, which does not import here ({reason}): "
                f"install it ({INSTALL_GPU}), or set inference.backend = 'transformers' to generate with transformers "
                "on the GPU (much slower)"
            ) from None
        if importlib.util.find_spec("vllm") is not None:  # an install that does not load: transformers, with a note why
            print(f"inference.backend = 'auto': vLLM is installed but does not import ({reason}); using transformers", flush=True)
        return False
    return True


def _gpu_would_generate(inference) -> bool:
    """Whether the transformers backend would generate on a GPU here (inference.device not "cpu", CUDA visible)."""
    if inference.device == "cpu":
        return False
    import torch

    return torch.cuda.is_available()
