"""Evaluation results as they come: one JSON line per finished episode in OUT/results.jsonl.

    results = ResultsFile(out / "results.jsonl")
    if not results.done(key): ...; results.add(row)          # key = (model, suite, dataset, episode)

A row is written and flushed to disk as soon as its episode is scored, so an interrupted evaluation (Ctrl-C, a
crash, a lost machine) loses at most the episodes in flight; the same command run again skips every finished
episode. A line cut by a crash is ignored when the file is read back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

Key = tuple[str, str, str, str]


def row_key(row: dict) -> Key:
    return (row["model"], row["suite"], row["dataset"], row["episode"])


class ResultsFile:
    def __init__(self, path: Path):
        self.path = path
        self.rows: dict[Key, dict] = {}
        if path.is_file():
            for line in path.read_text(errors="replace").splitlines():
                try:
                    row = json.loads(line)
                    self.rows[row_key(row)] = row
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue  # a line cut by a crash, or not ours
        self._handle = None

    def done(self, key: Key) -> bool:
        return key in self.rows

    def add(self, row: dict) -> None:
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(self.path, "a+b")  # noqa: SIM115 (kept open while the evaluation runs)
            if self._handle.tell() and (self._handle.seek(-1, 2), self._handle.read(1))[1] != b"\n":
                self._handle.write(b"\n")  # end a line a crash cut, so this row starts on its own line
        self._handle.write((json.dumps(row) + "\n").encode())
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self.rows[row_key(row)] = row

    def select(self, models: list[str], suite: str) -> list[dict]:
        return [r for r in self.rows.values() if r["suite"] == suite and r["model"] in models]

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
