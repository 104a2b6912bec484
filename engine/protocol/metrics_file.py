"""`metrics.jsonl` on disk: the one tolerant reader the engine's metrics log, the in-loop evaluation, the report,
the summary and the learner's replay share, and the one appender.

    rows = read_rows(paths.metrics)     # every row that decodes to a JSON object, in file order; [] without a file
    append_row(paths.metrics, row)      # one row at the end, on a line of its own even after a cut last line

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


def append_row(path: Path, row: dict) -> None:
    """Append `row` as one line; a last line a crash cut is ended first, so the new row starts on a line of its own."""
    with open(path, "a+b") as f:
        if f.tell() and (f.seek(-1, 2), f.read(1))[1] != b"\n":
            f.write(b"\n")
        f.write((json.dumps(row) + "\n").encode())
