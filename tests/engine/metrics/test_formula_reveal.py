"""The formula-reveal heuristic: what it flags and what it lets pass."""

from __future__ import annotations

import pytest

from engine.metrics.formula_reveal import equations, formula_reveal, reset_text, solution_literals, states_answer, states_method


@pytest.mark.parametrize(
    "text, answer",
    [
        ("Compute the area. The answer is 42.", "42"),
        ("Solve for x: 3x + 1 = 10, so x = 3. Answer as \\boxed{n}.", "3"),
        ("Solution: 17. Reply in \\boxed{}.", "\\boxed{17}"),
        ("Unscramble the word. (It is 'photosynthesis'.)", "photosynthesis"),
        ("The code is 3.1416, enter it.", "3.1416"),
    ],
)
def test_a_task_text_that_states_its_answer_is_flagged(text, answer):
    assert states_answer(text, answer)
    assert formula_reveal(text, "", [answer]).answer == answer
    assert formula_reveal(text, "", [answer])


@pytest.mark.parametrize(
    "text, answer",
    [
        ("Round 12: pick 1 or 2. Answer as \\boxed{n}.", "1"),  # the options, not the answer
        ("Compute 6 * 7. Answer as \\boxed{n}.", "42"),
        ("The answer is 421.", "42"),  # another number
        ("Answer in the form \\boxed{n}.", ""),
    ],
)
def test_a_task_text_that_does_not_state_its_answer_passes(text, answer):
    assert not states_answer(text, answer)


def test_the_method_of_the_hint_in_the_task_text_is_flagged():
    hint = "Use conservation of energy: v = sqrt(2*g*h), then round to one decimal."
    assert states_method("A ball falls from h = 5 m. Note v = sqrt(2 * g * h). Give v.", hint) == "v=sqrt(2*g*h)"
    assert states_method("Use the formula for the area of a circle and report it.", "") == "Use the formula"
    words = "Count the vowels in each word, then multiply the counts together and subtract the number of words."
    assert states_method("Words: apple, kiwi. Count the vowels in each word, multiply the counts together, subtract the number of words.", words) == "restates the hint"


def test_a_task_text_without_the_method_passes():
    hint = "Use conservation of energy: v = sqrt(2*g*h)."
    assert states_method("A ball falls from 5 m. How fast does it land? Answer in m/s.", hint) == ""
    assert not formula_reveal("A ball falls from 5 m. How fast does it land?", hint, ["9.9"])


def test_equations_of_a_hint():
    assert equations("Apply F = m * a and then p = m*v.") == ["f=m*a", "p=m*v"]
    assert equations("no maths here") == []


CODE = '''
import random

class AreaEnv:
    def reset(self, seed=None):
        self.r = random.Random(seed).randint(1, 9)
        return f"A circle has radius {self.r}. Use the formula A = pi * r^2.", {}

    def step(self, action):
        return "ok", 0.0, True, False, {}

    def solution(self):
        return ["12.5", 3]
'''


def test_reset_text_and_solution_literals_from_the_source():
    assert reset_text(CODE) == "A circle has radius  ... . Use the formula A = pi * r^2."
    assert solution_literals(CODE) == ["12.5", "3"]
    assert reset_text("not python (") == "" and solution_literals("class A: pass") == []
    assert formula_reveal(reset_text(CODE), "A = pi * r^2", solution_literals(CODE)).method == "Use the formula"
