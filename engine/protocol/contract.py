"""The environment contract that the designer's code, the sandbox's validator and the engine agree on.

An environment file holds exactly one top-level class whose name ends in "Env" (helpers may be other classes):
`env_classes` finds those classes in the parsed code (the validator requires exactly one), `env_class_name`
names it for the memory's "avoid" lines, and `code_fingerprint` tells when one environment reproduces another
(an edit task's verbatim or renamed copy is rejected as a duplicate: engine/refresh.py). Part of the shared
protocol layer: it imports nothing of ours.
"""

from __future__ import annotations

import ast


def env_classes(tree: ast.Module) -> list[ast.ClassDef]:
    """The top-level classes whose name ends in "Env"."""
    return [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name.endswith("Env")]


def env_class_name(code: str) -> str:
    """The environment's class name; "Env" when the code does not parse or has no such class."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return "Env"
    names = [node.name for node in env_classes(tree)]
    return names[0] if names else "Env"


def code_fingerprint(code: str) -> str | None:
    """What two environments share when one reproduces the other: the syntax tree with comments, docstrings,
    formatting and the names of the top-level classes taken out (a renamed copy is still a copy). None when the code
    does not parse (or is too deeply nested to)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                node.body = body[1:] or [ast.Pass()]
    names = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in names:
            node.name = "C"
        elif isinstance(node, ast.Name) and node.id in names:
            node.id = "C"
    try:
        return ast.dump(tree, annotate_fields=False)
    except RecursionError:
        return None
