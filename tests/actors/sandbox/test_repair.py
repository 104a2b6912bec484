"""The f-string brace repair (SPADE reference section 2): literal braces are escaped where that makes the
source parse, real placeholders are left alone, and sources that cannot be fixed come back unchanged."""

import ast

import pytest

from actors.sandbox import repair_fstring_braces


@pytest.mark.parametrize(("broken", "repaired"), [
    ('s = f"Answer as {row col}"\n', 's = f"Answer as {{row col}}"\n'),
    ('s = f"empty {} and {x}"\n', 's = f"empty {{}} and {x}"\n'),
    ('s = f"{x:.2f} {x!r} {x=} {a b}"\n', 's = f"{x:.2f} {x!r} {x=} {{a b}}"\n'),
    ('a = 1\nb = f"{1 2}" + f"{{ok}}"\nc = f"{3 4}"\n', 'a = 1\nb = f"{{1 2}}" + f"{{ok}}"\nc = f"{{3 4}}"\n'),
    ('msg = f"Reply as \\boxed{your answer}"\n', 'msg = f"Reply as \\boxed{{your answer}}"\n'),
])
def test_literal_braces_are_escaped(broken, repaired):
    with pytest.raises(SyntaxError):
        ast.parse(broken)
    assert repair_fstring_braces(broken) == repaired
    ast.parse(repaired)


def test_valid_source_is_returned_unchanged():
    source = 'x = {"a": 1}\ny = f"{x} {{literal}}"\n'
    assert repair_fstring_braces(source) is source


@pytest.mark.parametrize("broken", ["def f(:\n    pass\n", 'x = f"{a b"\n', "x = (\n"])
def test_unfixable_source_is_returned_unchanged(broken):
    assert repair_fstring_braces(broken) == broken


def test_repair_gives_up_after_the_iteration_limit():
    broken = "".join(f'line{i} = f"{{a{i} b}}"\n' for i in range(25))
    assert repair_fstring_braces(broken) == broken
    fixed = repair_fstring_braces(broken, max_iterations=30)
    ast.parse(fixed)
    assert fixed.count("{{") == 25


def test_only_fstrings_on_the_line_are_touched():
    broken = 'pair = (f"{a b}", {}, "{c d}")\n'
    assert repair_fstring_braces(broken) == 'pair = (f"{{a b}}", {}, "{c d}")\n'
