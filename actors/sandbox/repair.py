"""Repair of f-strings with unescaped braces, applied to a design before the validator gives up on it.

Designers often write `f"Use the format {row, col}"` or `f"a set: {}"` meaning literal braces. As in the SPADE
reference (spade-reference.md section 2): up to 20 times, parse; on a SyntaxError, in the offending line wrap
every `{inner}` whose inner text is not a valid Python expression as `{{inner}}`; stop when it parses or when
a round changes nothing. Inner text that is a valid expression is left alone, so real placeholders survive,
and only the line's f-strings are touched (an empty dict `{}` elsewhere on the line stays a dict).
"""

import ast
import io
import re
import tokenize

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


def _escape_literals(text: str) -> str:
    return _BRACED.sub(lambda m: m.group(0) if _is_expression(m.group(1)) else "{{" + m.group(1) + "}}", text)


def _fstring_spans(source: str, lineno: int) -> list[tuple[int, int]] | None:
    """Column spans of the single-line f-string tokens on line `lineno`; None if the source won't tokenize."""
    spans = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.STRING and token.start[0] == lineno == token.end[0]:
                prefix = token.string[:token.string.index(token.string[-1])].lower()
                if "f" in prefix:
                    spans.append((token.start[1], token.end[1]))
            elif token.start[0] > lineno:
                break
    except (tokenize.TokenError, SyntaxError):
        return None
    return spans


def _repair_line(source: str, line: str, lineno: int) -> str:
    """Escape literal braces inside the line's f-strings (the whole line where it cannot be tokenized)."""
    spans = _fstring_spans(source, lineno)
    if spans is None:
        return _escape_literals(line)
    for start, end in reversed(spans):
        line = line[:start] + _escape_literals(line[start:end]) + line[end:]
    return line


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
            fixed = _repair_line(repaired, lines[index], error.lineno)
            if fixed == lines[index]:
                return source
            lines[index] = fixed
            repaired = "".join(lines)
        else:
            return repaired
    return source
