"""Formula reveal (the paper's Figure 8): does an environment's task text state the method or the answer that its
hint or its `solution()` holds? A heuristic, so every rule is here and tested (tests/engine/metrics/test_formula_reveal.py).

    reveal = formula_reveal(task_text, hint, answers)   # Reveal(answer="...", method="...") ; bool(reveal)
    task_text = reset_text(code)     # without a decoded first observation: the string literals reset() returns
    answers = solution_literals(code)   # the constants solution() returns (a won play's last action adds its own)

The answer is stated when the text names it right after an answer cue ("the answer is 42", "= 42", "solution: 42"),
or when a specific answer (at least 4 characters, not a plain small number) stands in the text as a token of its
own. Short answers alone do not count: "pick 1 or 2" lists the options, it does not give the answer away.
The method is stated when the text says to use a formula, or holds an equation or expression the hint holds (`a = b`,
or terms joined by operators; 5+ characters once whitespace is squeezed out, case aside), or restates the hint: at
least 70% of the hint's content words (4+ letters, 5 or more of them) appear in the text.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

ANSWER_CUES = re.compile(
    r"(?:\banswer\s*(?:is|:|=|would be|will be)|\bsolution\s*(?:is|:|=)|\bresult\s*(?:is|:|=)|\bequals\b|=|"
    r"\bthe correct (?:choice|option|value) is)\s*[:\"'`(\[]*\s*$",
    re.I,
)
METHOD_CUES = re.compile(r"\b(?:use|using|apply|applying) (?:the |this )?(?:formula|equation|identity|rule)\b|\bformula\s*:|\bthe formula is\b", re.I)
_TERM = r"(?:[\w.^]+(?:\([^()]*\))?|\([^()]*\))"  # a name, number or call: x, 9.81, a^2, sqrt(2*g*h), (a + b)
_OP = r"(?:\s*[*/+^]\s*|\s+-\s+|-(?=\d))"  # a hyphen between words is no minus
_EQUATION = re.compile(rf"{_TERM}(?:{_OP}{_TERM})*\s*=\s*{_TERM}(?:{_OP}{_TERM})*")
_EXPRESSION = re.compile(rf"{_TERM}(?:{_OP}{_TERM})+")
_WORD = re.compile(r"[a-z]{4,}")
_REGEX = re.compile(r"\\[sdwSDW]|\(\?|\.\*|\\\{")  # a literal that is a regular expression, not text the player reads
STOPWORDS = frozenset(
    "that this with from your have will each they them then than there their what when which where while into only "
    "also just like some more most make made must need needs should would could about after before every other "
    "answer boxed format player game value values number numbers find given final step steps think turn turns "
    "first second look sure".split()
)


@dataclass(frozen=True)
class Reveal:
    answer: str = ""  # the answer the text states ("" if none)
    method: str = ""  # what of the method it states: a cue phrase, an equation, or "restates the hint"

    def __bool__(self) -> bool:
        return bool(self.answer or self.method)


def _normal(text: str) -> str:
    text = re.sub(r"\\boxed\{(.*?)\}", r"\1", text)
    return re.sub(r"\s+", " ", text).strip().lower()


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text.lower())


def _specific(answer: str) -> bool:
    return len(answer) >= 4 and not re.fullmatch(r"-?\d{1,3}", answer)


def states_answer(text: str, answer: str) -> bool:
    a = _normal(answer)
    if not a:
        return False
    t = _normal(text)
    for match in re.finditer(rf"(?<![\w.]){re.escape(a)}(?![\w]|\.\d)", t):
        if _specific(a) or ANSWER_CUES.search(t[max(0, match.start() - 40) : match.start()]):
            return True
    return False


def equations(text: str) -> list[str]:
    """The equations and operator-rich expressions in `text`, squeezed (no whitespace, lower case)."""
    found = [m.group(0) for m in _EQUATION.finditer(text)]
    found += [m.group(0) for m in _EXPRESSION.finditer(_EQUATION.sub(" ", text))]  # expressions outside the equations
    squeezed = (_squeeze(item).rstrip(".,;:") for item in found)  # a sentence's full stop is no decimal point
    return [item for item in squeezed if len(item) >= 5]


def states_method(text: str, hint: str) -> str:
    cue = METHOD_CUES.search(text)
    if cue:
        return cue.group(0)
    squeezed = _squeeze(text)
    for equation in equations(hint):
        if equation in squeezed:
            return equation
    hint_words = {w for w in _WORD.findall(hint.lower()) if w not in STOPWORDS}
    if len(hint_words) >= 5:
        text_words = set(_WORD.findall(text.lower()))
        if len(hint_words & text_words) >= 0.7 * len(hint_words):
            return "restates the hint"
    return ""


def formula_reveal(text: str, hint: str, answers: list[str] | tuple[str, ...] = ()) -> Reveal:
    answer = next((a for a in answers if states_answer(text, a)), "")
    return Reveal(answer=answer, method=states_method(text, hint) if text else "")


def _method(code: str, name: str) -> ast.FunctionDef | None:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _literal_text(node: ast.AST) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else " ... " for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _literal_text(node.left) + _literal_text(node.right)
    return ""


def reset_text(code: str) -> str:
    """The text reset() returns, as far as the source shows it: its string literals, formatted parts as `...`."""
    reset = _method(code, "reset")
    if reset is None:
        return ""
    texts = []
    for node in ast.walk(reset):
        if isinstance(node, ast.Return) and node.value is not None:
            value = node.value.elts[0] if isinstance(node.value, ast.Tuple) and node.value.elts else node.value
            texts.append(_literal_text(value))
    return "\n".join(t for t in texts if t)


def solution_literals(code: str) -> list[str]:
    """The constant answers solution() returns (a list of actions, or one): str(...) of each literal."""
    solution = _method(code, "solution")
    if solution is None:
        return []
    answers = []
    for node in ast.walk(solution):
        if isinstance(node, ast.Return) and node.value is not None:
            items = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            answers += [str(item.value) for item in items if isinstance(item, ast.Constant) and item.value is not None]
    return answers


def describe(code: str, limit: int = 320) -> str:
    """What an environment is about, in a few lines: its class name, its docstring, then the longer text literals
    of its methods in source order (its observations' templates); the code's start when it does not parse. The
    diversity metrics embed this rather than the imports and boilerplate."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code[:limit]
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    if not classes:
        return code[:limit]
    docstring = ast.get_docstring(classes[0]) or ""
    texts = []
    for node in ast.walk(classes[0]):
        if isinstance(node, (ast.JoinedStr, ast.Constant)) and not isinstance(getattr(node, "value", None), (int, float, bytes, type(None))):
            text = _literal_text(node).strip()
            if len(text) >= 12 and text != docstring and text not in texts and not _REGEX.search(text):
                texts.append(text)
    return "\n".join(p for p in [classes[0].name, docstring, *texts] if p)[:limit]
