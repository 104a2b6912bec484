"""The package rule (README, "Layout"), read from the imports of every module, lazy ones inside functions included.

- the protocol layer (`engine.protocol.messages`, `config`, `transport`, `paths`, `lifeline`, `errors`, `contract`, `keys`, `containment`) is
  what every process agrees on: it imports only itself;
- `storage` imports the protocol layer and itself;
- `engine` (the coordinator) imports the protocol layer, `storage` and itself, never `actors` or `learner`;
- `actors` and `learner` import the protocol layer and themselves, never each other, never `storage`;
- `engine` and `storage` never import torch, transformers, vllm or peft (so `--help` and the engine stay light);
- no module under `engine/` reaches into the `actors/` or `learner/` folder by file path either: data both sides read
  lives in engine/protocol/data/ and is named in engine/protocol/paths.py.
Each exception is listed in EXCEPTIONS with its reason.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "actors", "storage", "learner")
PROTOCOL = "engine.protocol"
HEAVY = ("torch", "transformers", "vllm", "peft", "accelerate")

# (importing module, imported module): why it is allowed.
EXCEPTIONS = {
    ("engine.cli", "actors.worker"): "the command line hands `worker` to the worker's own entry point (a lazy import)",
    ("engine.cli", "actors.sandbox.cli"): "the command line hands `validate` and `play` to the sandbox's entry points (lazy)",
    ("engine.cli", "actors.evaluation.cli"): "the command line hands `eval` to the evaluation's entry point (lazy)",
    ("engine.cli", "learner.replay"): "the command line hands `replay --train` to the learner's replay entry point (lazy: "
    "it trains, so it needs torch); the engine side reads the store and passes the batches in a file, so learner never reads storage",
}


def layer(module: str) -> str:
    if module == PROTOCOL or module.startswith(PROTOCOL + "."):
        return "protocol"
    return module.split(".")[0]


ALLOWED = {
    "protocol": {"protocol"},
    "storage": {"protocol", "storage"},
    "engine": {"protocol", "storage", "engine"},
    "actors": {"protocol", "actors"},
    "learner": {"protocol", "learner"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> list[tuple[str, int]]:
    """Every absolute module an import statement in `path` names (for `from X import Y`, X and X.Y when that is
    a module of ours), with its line."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno))
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                if (REPO / Path(*candidate.split("."))).with_suffix(".py").is_file() or (REPO / Path(*candidate.split("."))).is_dir():
                    found.append((candidate, node.lineno))
    return found


def package_modules() -> list[Path]:
    # the seed environments are data (sandboxed code the designer imitates), not modules of the packages
    return sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py") if "seeds" not in p.parts)


def violations() -> list[str]:
    problems = []
    for path in package_modules():
        importer = module_name(path)
        for imported, line in imports_of(path):
            top = imported.split(".")[0]
            where = f"{path.relative_to(REPO)}:{line}"
            if top in HEAVY and layer(importer) in ("protocol", "storage", "engine"):
                problems.append(f"{where}: {importer} imports {imported} (the engine and storage never import torch & co)")
            if top not in PACKAGES:
                continue
            if (importer, imported) in EXCEPTIONS or any(imported.startswith(b + ".") for a, b in EXCEPTIONS if a == importer):
                continue
            if layer(imported) not in ALLOWED[layer(importer)]:
                problems.append(f"{where}: {importer} ({layer(importer)}) imports {imported} ({layer(imported)})")
    return problems


def test_packages_import_only_what_the_rule_allows():
    assert violations() == []


def test_every_exception_is_still_needed():
    """An exception nobody uses any more is removed from the list."""
    used = {(module_name(p), m) for p in package_modules() for m, _ in imports_of(p)}
    assert [pair for pair in EXCEPTIONS if pair not in used] == []


@pytest.mark.parametrize(
    "importer, imported, expected",
    [
        ("storage.store", "engine.protocol.messages", True),
        ("storage.store", "engine.run", False),
        ("engine.run", "storage.store", True),
        ("engine.run", "actors.worker", False),
        ("actors.agent", "engine.rewards", False),
        ("actors.agent", "engine.protocol.messages", True),
        ("learner.trainer", "actors.inference.hf", False),
        ("engine.protocol.messages", "storage.records", False),
    ],
)
def test_the_rule_itself(importer, imported, expected):
    assert (layer(imported) in ALLOWED[layer(importer)]) is expected


def test_engine_modules_do_not_import_torch_when_loaded():
    """The same, at run time: loading every engine and storage module pulls in none of the heavy packages."""
    modules = [module_name(p) for p in package_modules() if p.relative_to(REPO).parts[0] in ("engine", "storage")]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


FOREIGN = ("actors", "learner")
PATH_CALLS = ("Path", "PurePath", "joinpath", "join")  # Path(...), p.joinpath(...), os.path.join(...)


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def foreign_paths(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """Where `source` names the actors/ or learner/ folder as a path: a string spelling "actors/..." (docstrings
    aside; comments are not in the tree), or the bare folder name joined into a path (`REPO / "actors"`,
    `Path("learner", ...)`, `os.path.join(..., "actors")`). The bare names alone are fine: "learner" is also a role."""
    tree = ast.parse(source, filename=filename)
    skip = _docstrings(tree)
    found = []

    def bare(node) -> bool:
        return isinstance(node, ast.Constant) and node.value in FOREIGN

    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if any(node.value.startswith(f"{name}/") or f"/{name}/" in node.value for name in FOREIGN):
                found.append((node.lineno, node.value))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            found += [(side.lineno, side.value) for side in (node.left, node.right) if bare(side)]
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in PATH_CALLS:
                found += [(arg.lineno, arg.value) for arg in node.args if bare(arg)]
    return found


def test_engine_does_not_reach_into_actors_or_learner_by_path():
    modules = [p for p in package_modules() if p.relative_to(REPO).parts[0] == "engine"]
    problems = [f"{p.relative_to(REPO)}:{line}: {text!r}" for p in modules for line, text in foreign_paths(p.read_text(), str(p))]
    assert problems == []


@pytest.mark.parametrize(
    "line, caught",
    [
        ('SEEDS_DIR = REPO / "actors" / "seeds"', True),  # engine/curriculum.py before the seeds moved
        ('RG_HARD = REPO / "actors" / "evaluation" / "data" / "reasoning_gym_hard.json"', True),
        ('path = Path("learner", "checkpoint.py")', True),
        ('path = os.path.join(REPO, "actors")', True),
        ('path = REPO.joinpath("learner")', True),
        ('path = Path(root) / "actors/seeds"', True),
        ('argv = ["python", "-m", "learner.train"]', False),
        ('role = "learner"', False),
        ('def f():\n    """Reads actors/seeds/ (a docstring)."""\n    return 1  # actors/seeds in a comment', False),
        ('SEEDS_DIR = DATA / "seeds"', False),
    ],
)
def test_foreign_path_check_itself(line, caught):
    assert bool(foreign_paths(line)) is caught
