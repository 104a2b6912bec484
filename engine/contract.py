"""The environment contract that the designer's code, the sandbox's validator and the engine agree on.

An environment file holds exactly one top-level class whose name ends in "Env" (helpers may be other classes):
`env_classes` finds those classes in the parsed code (the validator requires exactly one), `env_class_name`
names it for the memory's "avoid" lines. Part of the shared protocol layer: it imports nothing of ours.
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
