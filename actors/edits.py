"""Number edits: a variant of an environment that changes only its integer constants (`curriculum.edit_mode =
"numbers"`, the default's edit tasks; "code" asks for the whole code instead).

    found = numbers(code)                  # the editable integers, in source order
    values = parse_numbers(reply, len(found))    # the designer's new values (missing ones keep the old)
    variant = with_numbers(code, found, values)  # the code with them put in

Editable: every integer literal of 2 or more (0 and 1 are indices, steps and flags; floats are rewards), except the
defaults of function parameters (`max_turns=12`). Why: asked to write out a ~450-token seed with one change, the
embedded SmolLM2-135M gave 0 valid variants in 144 tries (it copies the first lines, then loops; 117 did not even
parse); a list of numbers it can write. The variant is validated, played and rewarded like any design.
"""

from __future__ import annotations

import ast
import re

MAX_VALUE = 1_000_000  # a larger new value is refused (it would make instances no game could hold)
MAX_NUMBERS = 24  # at most this many are offered (the first in source order)
_INT = re.compile(r"-?\d+")


def numbers(code: str) -> list[tuple[int, int, int, int]]:
    """(line, start column, end column, value) of each editable integer literal, in source order ([] when the code
    does not parse)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    defaults = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                if default is not None:
                    defaults.update(id(n) for n in ast.walk(default))
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 2 and id(node) not in defaults
                and node.lineno == node.end_lineno):
            found.append((node.lineno, node.col_offset, node.end_col_offset, node.value))
    found.sort()
    return found[:MAX_NUMBERS]


def parse_numbers(reply: str, count: int) -> list[int | None]:
    """The first `count` integers of the reply (its first \\boxed{...} when it has one); None for a missing or
    refused (negative, above MAX_VALUE) one."""
    boxed = re.search(r"\\boxed\{([^}]*)\}?", reply)
    text = boxed.group(1) if boxed else reply
    values: list[int | None] = []
    for match in _INT.finditer(text[:2000]):
        value = int(match.group())
        values.append(value if 0 <= value <= MAX_VALUE else None)
        if len(values) == count:
            break
    return values + [None] * (count - len(values))


def with_numbers(code: str, found: list[tuple[int, int, int, int]], values: list[int | None]) -> str:
    """`code` with each found number replaced by its new value (None keeps it)."""
    lines = code.splitlines(keepends=True)
    for (line, start, end, old), new in sorted(zip(found, values), reverse=True):
        if new is None or new == old:
            continue
        text = lines[line - 1]
        # columns are UTF-8 byte offsets: edit the encoded line
        raw = text.encode()
        lines[line - 1] = (raw[:start] + str(new).encode() + raw[end:]).decode()
    return "".join(lines)
