"""The transformers backend generates on the configured device, and `inference.backend = "auto"` refuses a GPU
machine where vLLM does not import (instead of generating there with transformers, many times slower).

This machine has no GPU, so CUDA is faked: `torch.cuda.is_available` answers True, and `nn.Module.to` records the
device each model is asked to go to, then moves it to the CPU instead. That is the code path of a GPU worker up to
the device itself (inference_device -> PolicyLoader -> load_model / apply_adapter -> Module.to); the CPU stands in
for cuda:0 only where the tensors finally live, and the inputs are checked to follow the model there.
"""

import os
import sys

import pytest
import torch

from actors.inference.base import GenerationRequest
from actors.inference.factory import AutoNeedsVLLM, backend_kind, build_backend
from actors.inference.hf import DeviceError, TransformersBackend, inference_device
from engine.protocol.config import InferenceConfig
from engine.protocol.config_loading import load_config
from engine.protocol.errors import describe_failure

PROMPT = [5, 6, 7, 8, 9, 10]


@pytest.fixture
def no_visible_devices(monkeypatch):
    """CUDA_VISIBLE_DEVICES as the test leaves it is undone afterwards."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def fake_cuda(monkeypatch, available: bool = True) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)


@pytest.fixture
def moved_to(monkeypatch) -> list[str]:
    """Every device a whole model is asked to move to (`model.to(device)`; the libraries' own moves of single
    layers are not counted); a CUDA device is replaced by the CPU."""
    from transformers import PreTrainedModel

    asked: list[str] = []
    original = torch.nn.Module.to

    def to(self, *args, **kwargs):
        target = kwargs.get("device", args[0] if args else None)
        if isinstance(target, (str, torch.device)):
            if isinstance(self, PreTrainedModel):
                asked.append(str(target))
            if str(target).startswith("cuda"):
                args, kwargs = ("cpu",), {k: v for k, v in kwargs.items() if k != "device"}
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "to", to)
    return asked


def test_auto_generates_on_the_first_listed_gpu(monkeypatch, no_visible_devices):
    fake_cuda(monkeypatch)
    assert inference_device(InferenceConfig(gpus=[3, 1])) == "cuda:0"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"  # made the only one, before CUDA starts


def test_auto_without_a_gpu_list_takes_gpu_0_and_without_cuda_the_cpu(monkeypatch, no_visible_devices):
    fake_cuda(monkeypatch)
    assert inference_device(InferenceConfig()) == "cuda:0"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    fake_cuda(monkeypatch, available=False)
    assert inference_device(InferenceConfig()) == "cpu"


def test_cpu_is_never_a_gpu_and_cuda_without_a_gpu_is_one_line(monkeypatch, no_visible_devices):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: pytest.fail("inference.device = cpu asked for CUDA"))
    assert inference_device(InferenceConfig(device="cpu", gpus=[2])) == "cpu"
    fake_cuda(monkeypatch, available=False)
    with pytest.raises(DeviceError) as caught:
        inference_device(InferenceConfig(device="cuda"))
    text, code = describe_failure(caught.value)
    assert code == 2 and text == "error: inference.device is cuda but no GPU is visible here: set inference.device = 'auto' or 'cpu'"


def _adapter(base_path, folder):
    """A LoRA adapter for the tiny model with non-zero B (so merging it changes the weights)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_path), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.5)
    model.save_pretrained(folder)
    return str(folder)


def test_worker_backend_puts_every_model_it_loads_on_the_gpu(tiny_model_path, tmp_path, monkeypatch, no_visible_devices, moved_to):
    """build_backend as a worker calls it: the base, a reloaded full policy and a merged adapter each go to cuda:0,
    and generate / score feed the model inputs on the model's own device."""
    adapter = _adapter(tiny_model_path, tmp_path / "adapter")
    moved_to.clear()
    fake_cuda(monkeypatch)
    config = load_config(overrides=["inference.backend=transformers", "inference.gpus=[1]"])
    backend = build_backend(config, tiny_model_path)
    assert isinstance(backend, TransformersBackend) and backend.device == "cuda:0"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    assert moved_to == ["cuda:0"]
    fake_cuda(monkeypatch, available=False)  # the backend keeps its device; the libraries (peft) must not think CUDA is here

    seen = []
    request = GenerationRequest(prompt_ids=PROMPT, max_new_tokens=4, temperature=1.0)

    def watch(model):
        model.register_forward_pre_hook(lambda module, args, kwargs: seen.append((kwargs["input_ids"].device, next(module.parameters()).device)), with_kwargs=True)

    watch(backend.model)
    generation = backend.generate([request])[0]
    backend.score(PROMPT, generation.completion_ids, 1.0)

    backend.load_weights(tiny_model_path, 1)  # a full policy folder
    assert moved_to == ["cuda:0", "cuda:0"]
    watch(backend.model)
    backend.generate([request])

    backend.load_weights(adapter, 2)  # the base again, then the adapter merged into a copy of it
    assert moved_to == ["cuda:0"] * 4
    assert backend.loader.base is not None
    watch(backend.model)
    backend.generate([request])
    backend.score(PROMPT, [11, 12], 1.0)
    assert seen and all(inputs == weights for inputs, weights in seen)


def test_auto_refuses_a_gpu_machine_where_vllm_does_not_import(monkeypatch):
    fake_cuda(monkeypatch)
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(AutoNeedsVLLM) as caught:
        backend_kind(load_config())
    text, code = describe_failure(caught.value)
    assert code == 2 and len(text.splitlines()) == 1
    assert text.startswith("error: inference.backend = 'auto' on a machine with a GPU needs vLLM, which does not import here (")
    assert "pip install -e '.[gpu]'" in text and "inference.backend = 'transformers'" in text


def test_auto_falls_back_to_transformers_on_a_cpu_machine_or_cpu_device(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "vllm", None)
    fake_cuda(monkeypatch, available=False)
    assert backend_kind(load_config()) == "transformers"
    fake_cuda(monkeypatch)
    assert backend_kind(load_config(overrides=["inference.device=cpu"])) == "transformers"  # the GPU is not asked for
    assert backend_kind(load_config(overrides=["inference.backend=transformers"])) == "transformers"  # explicit: no refusal
    assert capsys.readouterr().out == ""  # not installed (as opposed to broken): nothing to say
