"""Reading `metrics.jsonl` back: the one tolerant reader the engine's metrics log, the in-loop evaluation, the
report and the learner's replay share.

    rows = read_rows(paths.metrics)     # every row that decodes to a JSON object, in file order; [] without a file

It lives in the protocol layer because the learner (learner/replay.py) reads the run's live losses from it and may
import nothing else of the engine. The file is appended to while the run goes on and a crash can cut its last line,
so what does not decode is skipped rather than fatal: a cut line, an empty line, stray bytes, a value that is not
an object.
"""

from __future__ import annotations

import json
from pathlib import Path


def read_rows(path: Path) -> list[dict]:
    """The rows of the metrics file at `path` that are JSON objects; [] when it is missing or not a file."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_bytes().splitlines():
        try:
            row = json.loads(line)
        except ValueError:  # a line cut by a crash (JSONDecodeError), or bytes that are not UTF-8
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows
