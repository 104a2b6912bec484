"""Static checks on an environment's source: a quality filter run before anything executes.

These are not the security boundary (the sandbox is): they turn away designs that break the contract or reach
for things an environment has no use for, with a message the designer can act on. Each check returns
(name, passed, detail); `run_static_checks` runs them all on one parsed tree.
"""

import ast

from actors.sandbox.isolation import ALLOWED_MODULES
from engine.protocol.contract import env_classes

# Attributes that only serve to climb out of the namespace an environment is given.
FORBIDDEN_ATTRIBUTES = frozenset({
    "__subclasses__", "__globals__", "__builtins__", "__code__", "__closure__", "__bases__", "__base__", "__mro__",
    "__getattribute__", "__reduce__", "__reduce_ex__", "__loader__", "__spec__", "__import__", "__self__",
    "__func__", "__traceback__", "__frame__", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "f_globals",
    "f_locals", "f_back", "f_builtins", "f_code", "tb_frame", "tb_next", "co_code", "__dict__",
})
FORBIDDEN_NAMES = frozenset({"__import__", "__builtins__", "__loader__", "__spec__", "__file__", "__cached__"})
FORBIDDEN_CALLS = frozenset({
    "eval", "exec", "compile", "open", "input", "breakpoint", "globals", "locals", "vars", "memoryview", "exit",
    "quit", "help",
})
ATTRIBUTE_FUNCTIONS = frozenset({"getattr", "setattr", "delattr", "hasattr"})

CheckResult = tuple[str, bool, str]


def _method(tree: ast.Module, cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    """The method `name` of `cls`, looking through base classes defined in the same source."""
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    seen: set[str] = set()
    pending = [cls]
    while pending:
        current = pending.pop(0)
        if current.name in seen:
            continue
        seen.add(current.name)
        for node in current.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return node  # type: ignore[return-value]
        pending += [classes[b.id] for b in current.bases if isinstance(b, ast.Name) and b.id in classes]
    return None


def _single_env_class(tree: ast.Module) -> CheckResult:
    names = [c.name for c in env_classes(tree)]
    if len(names) == 1:
        return "single_env_class", True, names[0]
    found = ", ".join(names) if names else "none"
    return "single_env_class", False, f"expected exactly one top-level class whose name ends in 'Env', found {found}"


def _init_signature(tree: ast.Module, cls: ast.ClassDef) -> CheckResult:
    name = "init_signature"
    init = _method(tree, cls, "__init__")
    if init is None:
        return name, True, "no __init__ (defaults only)"
    args = init.args
    positional = args.posonlyargs + args.args
    required = len(positional) - len(args.defaults) - 1  # minus self
    kw_required = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    if required > 0 or kw_required:
        return name, False, "__init__ must be callable with no arguments: give every parameter a default"
    return name, True, "every parameter has a default"


def _reset_signature(tree: ast.Module, cls: ast.ClassDef) -> CheckResult:
    name = "reset_signature"
    reset = _method(tree, cls, "reset")
    if reset is None:
        return name, False, "the Env class has no reset(self, seed=None) method"
    args = reset.args
    names = [a.arg for a in args.posonlyargs[1:] + args.args[1:] + args.kwonlyargs]
    if "seed" not in names and args.kwarg is None:
        return name, False, "reset() must accept a `seed` keyword argument"
    positional = args.posonlyargs + args.args
    if len(positional) - len(args.defaults) > 1:
        return name, False, "reset() must be callable as reset(seed=...): give its other parameters defaults"
    return name, True, "reset(seed=...)"


def _step_signature(tree: ast.Module, cls: ast.ClassDef) -> CheckResult:
    name = "step_signature"
    step = _method(tree, cls, "step")
    if step is None:
        return name, False, "the Env class has no step(self, action) method"
    args = step.args
    positional = args.posonlyargs + args.args
    required = len(positional) - len(args.defaults)
    if len(positional) < 2 and args.vararg is None or required > 2:
        return name, False, "step() must take exactly one argument, the action string: step(self, action)"
    return name, True, "step(self, action)"


def _allowed_imports(tree: ast.Module) -> CheckResult:
    bad: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.partition(".")[0] not in ALLOWED_MODULES]
        elif isinstance(node, ast.ImportFrom):
            if node.level or node.module is None:
                bad.append("." * node.level + (node.module or ""))
            elif node.module.partition(".")[0] not in ALLOWED_MODULES:
                bad.append(node.module)
    if bad:
        return ("allowed_imports", False, f"imports outside the allow-list: {', '.join(sorted(set(bad)))} "
                f"(allowed: {', '.join(m for m in ALLOWED_MODULES if m != '__future__')})")
    return "allowed_imports", True, "only allow-listed modules"


def _no_dunder_tricks(tree: ast.Module) -> CheckResult:
    modules = {a.asname or a.name.partition(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
               for a in node.names}
    problems: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr in FORBIDDEN_ATTRIBUTES:
                problems.append(f"attribute {node.attr} (line {node.lineno})")
            elif (node.attr.startswith("_") and isinstance(node.value, ast.Name) and node.value.id in modules
                  and not node.attr.startswith("__")):
                problems.append(f"private module attribute {node.value.id}.{node.attr} (line {node.lineno})")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            problems.append(f"name {node.id} (line {node.lineno})")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in FORBIDDEN_CALLS:
                problems.append(f"call to {node.func.id}() (line {node.lineno})")
            elif node.func.id in ATTRIBUTE_FUNCTIONS and len(node.args) >= 2:
                attr = node.args[1]
                if not (isinstance(attr, ast.Constant) and isinstance(attr.value, str)):
                    continue
                if attr.value.startswith("__") or attr.value in FORBIDDEN_ATTRIBUTES:
                    problems.append(f"{node.func.id}() of {attr.value} (line {node.lineno})")
    if problems:
        more = f" and {len(problems) - 5} more" if len(problems) > 5 else ""
        return "no_dunder_tricks", False, "; ".join(problems[:5]) + more
    return "no_dunder_tricks", True, "no introspection escapes"


def run_static_checks(tree: ast.Module) -> list[CheckResult]:
    classes = env_classes(tree)
    if len(classes) == 1:
        cls = classes[0]
        signatures = [_init_signature(tree, cls), _reset_signature(tree, cls), _step_signature(tree, cls)]
    else:
        signatures = [(name, False, "not run: single_env_class failed")
                      for name in ("init_signature", "reset_signature", "step_signature")]
    return [_single_env_class(tree), *signatures, _allowed_imports(tree), _no_dunder_tricks(tree)]
