"""The package rule (README, "Layout"), read from the imports of every module, lazy ones inside functions included.

- the protocol layer (`engine.protocol.messages`, `config`, `transport`, `paths`, `lifeline`, `errors`, `contract`, `keys`, `containment`) is
  what every process agrees on: it imports only itself;
- `storage` imports the protocol layer and itself;
- `engine` (the coordinator) imports the protocol layer, `storage` and itself, never `actors` or `learner`;
- `actors` and `learner` import the protocol layer and themselves, never each other, never `storage`;
- `engine` and `storage` never import torch, transformers, vllm or peft (so `--help` and the engine stay light);
- no module under `engine/` reaches into the `actors/` or `learner/` folder by file path either: data both sides read
  lives in engine/protocol/data/ and is named in engine/protocol/paths.py;
- inside `engine`, the rooms import downward only: protocol <- peers, metrics (and rewards) <- the loop's stages <-
  tools <- cli;
- `actors.sandbox` imports nothing else of `actors` (infrastructure below the settings);
- no import cycle among our modules, lazy imports included (type-only ones aside).
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
    ("engine.cli", "actors.environment_cli"): "the command line hands `validate` and `play` to their entry points (lazy)",
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


# engine's rooms, lowest first (README, "Layout"): a module imports only its own room and those below it. The loop's
# stages are every other module of engine/ (run, refresh, plays, batches, designer_reward, ...); engine.rewards, the
# reward arithmetic (pure functions over protocol types), sits with the metrics, which report it.
ROOMS = {"engine.protocol": 0, "engine.peers": 1, "engine.metrics": 1, "engine.rewards": 1, "engine.tools": 3, "engine.cli": 4}
STAGES = 2


def room(module: str) -> int:
    return next((rank for prefix, rank in ROOMS.items() if module == prefix or module.startswith(prefix + ".")), STAGES)


def room_violations() -> list[str]:
    problems = []
    for path in package_modules():
        importer = module_name(path)
        if layer(importer) not in ("engine", "protocol"):
            continue
        for imported, line in imports_of(path):
            if imported.split(".")[0] == "engine" and room(imported) > room(importer):
                problems.append(f"{path.relative_to(REPO)}:{line}: {importer} (room {room(importer)}) imports {imported} (room {room(imported)})")
    return problems


def test_engines_rooms_import_only_downward():
    """protocol <- peers, metrics <- the loop's stages <- tools <- cli: so engine.tools (the offline commands) is
    imported by engine.cli alone, and nothing the loop runs depends on a command."""
    assert room_violations() == []


@pytest.mark.parametrize("importer, imported, allowed", [
    ("engine.peers.result_checks", "engine.tools.models", False),
    ("engine.metrics.curriculum_signals", "engine.tools.transcript", False),
    ("engine.run", "engine.peers.hub", True),
    ("engine.tools.report", "engine.metrics.observations", True),
    ("engine.cli", "engine.tools.node_plan", True),
    ("engine.protocol.placement", "engine.peers.hub", False),
])
def test_the_rooms_rule_itself(importer, imported, allowed):
    assert (room(imported) <= room(importer)) is allowed


def test_the_sandbox_imports_nothing_else_of_actors():
    """actors/sandbox is infrastructure: which validator a design gets, and who plays a task, are actors/settings.py's."""
    found = [f"{path.relative_to(REPO)}:{line}: {imported}" for path in sorted((REPO / "actors" / "sandbox").rglob("*.py"))
             for imported, line in imports_of(path)
             if imported.startswith("actors.") and not imported.startswith("actors.sandbox")]
    assert found == []


def _module_imports(path: Path) -> set[str]:
    """The modules of ours `path` imports at run time (lazy ones included), each resolved to the module file that
    holds it: imports under `if TYPE_CHECKING:` are left out, and so is the package of `from package import module`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    type_only = {n.lineno for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                 for n in ast.walk(node) if hasattr(n, "lineno")}
    names = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in type_only:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            submodules = [f"{node.module}.{a.name}" for a in node.names if _is_module(f"{node.module}.{a.name}")]
            names += submodules if len(submodules) == len(node.names) else [node.module, *submodules]
    return {name for name in names if name.split(".")[0] in PACKAGES}


def _is_module(name: str) -> bool:
    base = REPO / Path(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def import_cycles() -> list[list[str]]:
    """The strongly connected groups of two or more modules in the run-time import graph (Tarjan's algorithm)."""
    modules = {module_name(p): p for p in package_modules()}
    graph = {m: {n for n in _module_imports(p) if n in modules and n != m} for m, p in modules.items()}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycles():
    """No module of ours imports, through others, itself (type-only imports aside)."""
    assert import_cycles() == []
