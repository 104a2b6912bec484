"""The tool-use setting (spade-reference.md §8): the designer writes tool APIs over `ToolUseBaseEnv` (which the
sandbox provides, actors/sandbox/tool_env.py) with instructions revealed one at a time; the agent calls the tools
(`agent.py`), its calls parsed from `<tool_call>` blocks (`parsing.py`); `validator.py` checks the specs, the
tools' determinism, the state checks and that the `solution()` plan completes every instruction."""

import ast

BASE_CLASS = "ToolUseBaseEnv"


def is_tool_use_source(source: str) -> bool:
    """Whether `source` defines a top-level class deriving from ToolUseBaseEnv (the tool-use setting's designs)."""
    if BASE_CLASS not in source:
        return False
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return f"({BASE_CLASS})" in source
    return any(isinstance(node, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id == BASE_CLASS for b in node.bases)
               for node in tree.body)
