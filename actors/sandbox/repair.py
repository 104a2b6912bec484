"""Repair of f-strings with unescaped braces, applied to a design before the validator gives up on it.

Designers often write `f"Use the format {row, col}"` or `f"a set: {}"` meaning literal braces. As in the SPADE
reference (spade-reference.md section 2): up to 20 times, parse; on a SyntaxError, in the offending line wrap
every `{inner}` whose inner text is not a valid Python expression as `{{inner}}`; stop when it parses or when
a round changes nothing. Inner text that is a valid expression is left alone, so real placeholders survive.
"""

import ast
import re

MAX_ITERATIONS = 20
# A single-braced group with no braces inside: `{x}` but not `{{x}}`.
_BRACED = re.compile(r"(?<!\{)\{([^{}\n]*)\}(?!\})")


def _is_expression(text: str) -> bool:
    """Whether `{text}` is a real replacement field (an expression, maybe with `!r`, `=` or a format spec)."""
    if not text.strip():
        return False
    for quote in ('"', "'", '"""', "'''"):
        if quote not in text:
            try:
                ast.parse(f"f{quote}{{{text}}}{quote}", mode="eval")
            except SyntaxError:
                return False
            return True
    return False


def _repair_line(line: str) -> str:
    return _BRACED.sub(lambda m: m.group(0) if _is_expression(m.group(1)) else "{{" + m.group(1) + "}}", line)


def repair_fstring_braces(source: str, max_iterations: int = MAX_ITERATIONS) -> str:
    """Return `source` with literal braces in f-strings escaped where that makes it parse (else unchanged)."""
    repaired = source
    for _ in range(max_iterations):
        try:
            ast.parse(repaired)
        except SyntaxError as error:
            if error.lineno is None:
                return source
            lines = repaired.splitlines(keepends=True)
            index = error.lineno - 1
            if not 0 <= index < len(lines):
                return source
            fixed = _repair_line(lines[index])
            if fixed == lines[index]:
                return source
            lines[index] = fixed
            repaired = "".join(lines)
        else:
            return repaired
    return source
