"""What a model folder's config.json says, read without torch (the engine never imports it).

    read_vocab_size(path)   # the vocabulary size: the bound of every token id a worker sends (engine/peers/result_checks.py)
"""

from __future__ import annotations

import json
from pathlib import Path


def read_vocab_size(path: str | Path) -> int | None:
    """The model's vocabulary size (`vocab_size` in config.json, or in its `text_config`), without torch; None when
    the folder or the field is missing. The engine bounds every token id a worker sends by it."""
    try:
        data = json.loads((Path(path).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for table in (data, data.get("text_config")) if isinstance(data, dict) else ():
        value = table.get("vocab_size") if isinstance(table, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
