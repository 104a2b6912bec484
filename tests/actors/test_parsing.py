"""Parsing a model's reply: the action in it, the code block a designer wrote, and a cleaned-up hint."""

import pytest

from actors.parsing import clean_hint, extract_code, parse_action


@pytest.mark.parametrize(
    "reply, action, rule",
    [
        ("I think \\boxed{3} then \\boxed{4}", "\\boxed{3}", "boxed_first"),
        ("so \\boxed{{7}}", "\\boxed{7}", "boxed_first"),
        ("nested \\boxed{\\frac{1}{2}}", "\\boxed{\\frac{1}{2}}", "boxed_last"),
        ("<answer> left </answer>", "\\boxed{left}", "answer_tag"),
        ("Thinking...\nThe answer is 42.", "\\boxed{42}", "answer_phrase"),
        ("  go north  ", "go north", "raw"),
    ],
)
def test_parse_action(reply, action, rule):
    assert parse_action(reply) == (action, rule)


def test_extract_code_variants():
    assert extract_code("text\n```python\nx = 1\n```\nmore") == "x = 1"
    assert extract_code("```python\nclass A:\n    pass") == "class A:\n    pass"
    assert extract_code("x = 2") == "x = 2"


def test_clean_hint_json_and_length():
    assert clean_hint('```json\n{"hint": "Try small numbers."}\n```') == "Try small numbers."
    assert len(clean_hint("word " * 300).split()) == 100
