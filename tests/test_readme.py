"""The README's deviations tables: every default that departs from the paper preset has a row, every row's
reference value is engine/protocol/reference.py's, and every departure of `paper` from that table has a row."""
import re
from pathlib import Path

import msgspec

from engine.protocol.config_loading import load_config
from engine.protocol.reference import REFERENCE

README = Path(__file__).resolve().parent.parent / "README.md"


def _differences(default: dict, paper: dict, prefix: str = "") -> list[str]:
    found = []
    for key in sorted(set(default) | set(paper)):
        a, b = default.get(key), paper.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            found.append(prefix + key)
    return found


def _row_names(text: str) -> list[str]:
    """`section.key`, and the bare `key`s after it in the same cell, as dotted names, in the cell's order."""
    names, section = [], ""
    for name in re.findall(r"`([a-z_][a-z0-9_.]*)`", text):
        if "." in name:
            section = name.rsplit(".", 1)[0]
            names.append(name)
        elif section:
            names.append(f"{section}.{name}")
    return names


def _dotted_names(text: str) -> set[str]:
    return set(_row_names(text))


def _tables() -> str:
    """The README from the deviations table to the prose after the paper's departures."""
    return README.read_text().split("Reference value, the default\npreset's", 1)[1].split("Not switches, because", 1)[0]


def _rows(text: str) -> list[list[str]]:
    return [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| `")]


def _listed() -> set[str]:
    table = _tables()
    listed, prose = set(), []
    for line in table.splitlines():
        if line.startswith("| `"):
            listed |= _dotted_names(line.split("|")[1])
        elif not line.startswith("|"):
            prose.append(line)
    for part in " ".join(prose).split("("):  # the "Sizes only" paragraph: names, then their values in brackets
        listed |= _dotted_names(part)
    return listed


def test_every_departure_from_the_paper_preset_has_a_row():
    default = msgspec.to_builtins(load_config("default"))
    paper = msgspec.to_builtins(load_config("paper"))
    differences = _differences(default, paper)
    assert "learner.learning_rate" in differences  # the comparison sees the sections
    missing = [name for name in differences if name not in _listed()]
    assert not missing, f"defaults that depart from the paper preset with no row in README's table: {missing}"


def test_the_parser_reads_bare_keys_after_a_dotted_one():
    assert _dotted_names("`play.hint_max_tokens`, `max_context_tokens`") == {
        "play.hint_max_tokens", "play.max_context_tokens"}


def _value(token: str):
    """A value as a row writes it: `true`, 0.15, `""`, `tis`: the backticked text, else the first word."""
    token = token.strip()
    text = token[1:token.index("`", 1)] if token.startswith("`") else token.split()[0]
    if text == '""':
        return ""
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _reference_values(cell: str, count: int) -> list:
    """The first `count` values of a reference cell: before its first ":", ";" or " (", comma-separated."""
    head = re.split(r":|;| \(", cell.strip(), maxsplit=1)[0]
    return [_value(token) for token in head.split(", ")[:count]]


def _same(a, b) -> bool:
    return a == b and (type(a) is bool) == (type(b) is bool)


def test_every_row_gives_the_reference_value_of_the_reference_table():
    checked, wrong = 0, []
    for cells in _rows(_tables()):
        names = _row_names(cells[0])
        known = [name for name in names if name in REFERENCE]
        if not known:
            continue  # a switch the reference has no value for (edits are this engine's)
        assert known == names, f"README row {cells[0].strip()}: {sorted(set(names) - set(known))} not in REFERENCE"
        written = _reference_values(cells[1], len(names))
        for name, value in zip(names, written, strict=True):
            checked += 1
            if not _same(value, REFERENCE[name][0]):
                wrong.append(f"{name}: README {value!r}, engine/protocol/reference.py {REFERENCE[name][0]!r}")
    assert checked > 20, checked  # the parser sees the rows
    assert not wrong, "README's reference column against REFERENCE: " + "; ".join(wrong)


def test_every_departure_of_paper_from_the_reference_table_has_a_row():
    paper = load_config("paper")
    departures = []
    for name, (value, _source) in REFERENCE.items():
        got = paper
        for part in name.split("."):
            got = getattr(got, part)
        if not _same(got, value):
            departures.append(name)
    assert departures  # curriculum.revalidate: the engine never trusts a peer's verdict
    table = _tables().split("Where `paper` departs from the reference", 1)[1]
    listed = {name for cells in _rows(table) for name in _row_names(cells[0])}
    missing = [name for name in departures if name not in listed]
    assert not missing, f"paper departs from engine/protocol/reference.py with no row in README's table: {missing}"


def test_a_reference_cell_reads_as_values():
    assert _reference_values("`tis`, cap 2", 1) == ["tis"]
    assert _reference_values("0: min(#agent samples trained / #designer samples * k, 50) = 32", 1) == [0]
    assert _reference_values("3 (1, 2, 4 s apart); none left", 1) == [3]
    assert _reference_values('`reason`, `""`: reason step by step', 2) == ["reason", ""]
    assert _reference_values("5, 6000, 2, 2000", 4) == [5, 6000, 2, 2000]
    assert _reference_values("`false`: only its regret path", 1) == [False]


def test_the_layout_names_every_engine_module_and_run_py_keeps_its_size():
    layout = README.read_text().split("## Layout", 1)[1]
    modules = [p for p in (README.parent / "engine").rglob("*.py")
               if p.name not in ("__init__.py", "__main__.py") and "data" not in p.parts]
    assert [str(p) for p in modules if p.stem not in layout] == []
    bound = int(re.search(r"`engine/run.py` \(under (\d+) lines\)", README.read_text()).group(1))
    assert len((README.parent / "engine" / "run.py").read_text().splitlines()) < bound
