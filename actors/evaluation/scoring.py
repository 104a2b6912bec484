"""Prompts and scorers of the local suites: boxed-answer math, multiple-choice science, code with tests.

- math `{"question", "answer"}`: the reply's last \\boxed{...} (braces matched), normalised (spaces, $, \\left /
  \\right, \\dfrac, \\text{}, thousands commas, a trailing period; numbers compared as numbers), equal to the
  normalised answer.
- science `{"question", "choices", "answer"}`: the answer is a letter ("B"), a 0-based index or the text of a
  choice; the reply's letter (\\boxed{B}, "answer is B", "Answer: (B)", or a reply that is only the letter) must
  match it.
- code `{"prompt", "tests"}`: the reply's first ```python block (else the reply) and the tests (asserts) run as one
  environment in the sandbox pool (`code_test_environment`): the tests run in `step`, so a failed assert, an
  exception, a hang (sandbox step timeout), a forbidden import or an attack on the sandbox fails the episode,
  which scores 0.
"""

from __future__ import annotations

import re
import string
import textwrap
from fractions import Fraction

from actors.parsing import extract_code

LETTERS = string.ascii_uppercase

MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
SCIENCE_INSTRUCTION = "Answer with the letter of the correct choice within \\boxed{}, for example \\boxed{A}."
CODE_INSTRUCTION = (
    "Write the solution in Python (standard library only: math, re, itertools, collections, heapq, functools, ...) "
    "in one ```python code block."
)


# ------------------------------------------------------------------------------------------------------- math
def last_boxed(reply: str) -> str | None:
    """The content of the last \\boxed{...} (nested braces matched), or None."""
    start = reply.rfind("\\boxed")
    while start >= 0:
        i = reply.find("{", start)
        if i >= 0 and reply[start + len("\\boxed"):i].strip() == "":
            depth = 0
            for j in range(i, len(reply)):
                depth += {"{": 1, "}": -1}.get(reply[j], 0)
                if depth == 0:
                    return reply[i + 1:j]
        start = reply.rfind("\\boxed", 0, start)
    return None


_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")


def normalise_math(answer: str) -> str:
    s = str(answer).strip()
    s = _TEXT.sub(r"\1", s)
    for old, new in (("\\left", ""), ("\\right", ""), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\!", ""),
                     ("\\,", ""), ("\\;", ""), ("\\ ", ""), ("$", ""), ("^\\circ", ""), ("^{\\circ}", "")):
        s = s.replace(old, new)
    s = re.sub(r"\s+", "", s).rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    frac = re.fullmatch(r"(-?)\\frac\{?(-?\d+)\}?\{?(\d+)\}?", s)
    try:
        if frac:
            value = Fraction(int(frac.group(2)), int(frac.group(3))) * (-1 if frac.group(1) else 1)
        elif re.fullmatch(r"-?\d+(\.\d+)?|-?\d+/\d+", s):
            value = Fraction(s)
        else:
            return s
    except (ValueError, ZeroDivisionError):
        return s
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def math_prompt(question: str) -> str:
    return f"{question.strip()}\n\n{MATH_INSTRUCTION}"


def score_math(reply: str, answer: str) -> tuple[float, str | None]:
    """(1.0 or 0.0, the extracted answer or None when the reply has no \\boxed{})."""
    got = last_boxed(reply)
    if got is None:
        return 0.0, None
    return (1.0 if normalise_math(got) == normalise_math(answer) else 0.0), got


# ---------------------------------------------------------------------------------------------------- science
def answer_letter(answer, choices: list[str]) -> str:
    """The reference answer as a letter: a letter, a 0-based index, or the text of one of the choices."""
    if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < len(choices):
        return LETTERS[answer]
    text = str(answer).strip()
    if len(text) == 1 and text.upper() in LETTERS[: len(choices)]:
        return text.upper()
    for i, choice in enumerate(choices):
        if text == str(choice).strip():
            return LETTERS[i]
    raise ValueError(f"answer {answer!r} is neither a letter, an index nor one of the choices")


def science_prompt(question: str, choices: list[str]) -> str:
    lines = [question.strip(), ""] + [f"{LETTERS[i]}) {c}" for i, c in enumerate(choices)]
    return "\n".join(lines) + f"\n\n{SCIENCE_INSTRUCTION}"


def reply_letter(reply: str, count: int) -> str | None:
    valid = LETTERS[:count]
    boxed = last_boxed(reply)
    candidates = []
    if boxed is not None:
        candidates.append(boxed)
    candidates += re.findall(r"answer\s*(?:is|:)\s*:?\s*\(?([A-Za-z])\)?(?![A-Za-z])", reply, re.IGNORECASE)[-1:]
    candidates.append(reply)
    for text in candidates:
        m = re.fullmatch(r"\s*\(?\s*(?:\\text\{)?([A-Za-z])\}?\s*\)?\s*\.?\s*", text)
        if m and m.group(1).upper() in valid:
            return m.group(1).upper()
    return None


def score_science(reply: str, letter: str, count: int) -> tuple[float, str | None]:
    got = reply_letter(reply, count)
    return (1.0 if got == letter else 0.0), got


# ------------------------------------------------------------------------------------------------------- code
def code_prompt(prompt: str) -> str:
    return f"{prompt.strip()}\n\n{CODE_INSTRUCTION}"


def candidate_code(reply: str) -> str | None:
    """The reply's code (the first ```python block, else the whole reply); None for an empty reply."""
    code = extract_code(reply)
    return code if code.strip() else None


def code_test_environment(solution: str, tests: str) -> str:
    """One environment whose `step` runs the tests against the solution (both at the module's top level)."""
    body = textwrap.indent(tests.strip("\n") or "pass", "    ")
    return (
        f"{solution.rstrip()}\n\n\n"
        f"def _spade_run_tests():\n{body}\n\n\n"
        "class SpadeCodeTestsEnv:\n"
        "    def __init__(self, max_turns=1, **kwargs):\n"
        "        self.max_turns = max_turns\n\n"
        "    def reset(self, seed=None):\n"
        "        return 'run the tests', {}\n\n"
        "    def step(self, action):\n"
        "        _spade_run_tests()\n"
        "        return 'all tests passed', 1.0, True, False, {}\n"
    )
