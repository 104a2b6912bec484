"""The README's table of deviations names every default that departs from the paper preset."""
import re
from pathlib import Path

import msgspec

from engine.protocol.config_loading import load_config

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


def _dotted_names(text: str) -> set[str]:
    """`section.key`, and the bare `key`s after it in the same cell, as dotted names."""
    names, section = set(), ""
    for name in re.findall(r"`([a-z_][a-z0-9_.]*)`", text):
        if "." in name:
            section, names = name.rsplit(".", 1)[0], names | {name}
        elif section:
            names.add(f"{section}.{name}")
    return names


def _listed() -> set[str]:
    text = README.read_text()
    table = text.split("Reference value, the default\npreset's", 1)[1].split("Not switches, because", 1)[0]
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
