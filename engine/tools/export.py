"""`bin/spade-engine replay RUN_DIR --export FILE`: every stored record with every field, for analysis elsewhere.

    FILE.jsonl     one JSON object per line: {"kind": "environment" | "trajectory" | "memory" | "designer_reward" |
                   "batch" | "state", ...the record's fields}; a trajectory's token arrays are lists
                   (`sample.tokens`, `loss_mask`, `versions` of ints, `logprobs` of floats, exactly the stored float32)
    FILE.parquet   the same rows as one Parquet file per kind beside it (FILE-environment.parquet, ...), when pyarrow
                   is installed; `checks` become {name, passed, detail} structs there, batch `entries`
                   {trajectory_key, advantage, reward}, and free-form maps JSON text (named in `json_fields`)

`record_from_row(kind, row)` turns a row back into the stored record (tests/engine/tools/test_export.py round-trips every
field). Reads one database at a time in its own LMDB read transaction, so it runs beside a live engine; a record
that does not decode is skipped and reported (storage/scan.py), the rest is exported.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from engine.protocol.errors import InputError
from engine.protocol.messages import Sample, pack_floats, pack_ints, pack_mask, unpack_floats, unpack_ints, unpack_mask
from storage.records import (
    BatchRecord,
    DesignerRewardRecord,
    EnvironmentRecord,
    MemoryRecord,
    RunState,
    StoredRecordError,
    TrajectoryRecord,
)
from storage.scan import tolerant, tolerant_get
from storage.store import Store

KINDS = {
    "environment": ("environments", EnvironmentRecord),
    "trajectory": ("trajectories", TrajectoryRecord),
    "memory": ("memory", MemoryRecord),
    "designer_reward": ("designer_rewards", DesignerRewardRecord),
    "batch": ("batches", BatchRecord),
}


def sample_row(sample: Sample) -> dict:
    row = msgspec.to_builtins(sample)
    row.update(
        tokens=unpack_ints(sample.tokens).tolist(), loss_mask=unpack_mask(sample.loss_mask).tolist(),
        logprobs=unpack_floats(sample.logprobs).tolist(), versions=unpack_ints(sample.versions).tolist(),
    )
    return row


def record_row(kind: str, record) -> dict:
    row = {"kind": kind, **msgspec.to_builtins(record)}
    if kind == "trajectory":
        row["sample"] = sample_row(record.sample)
    return row


def record_from_row(kind: str, row: dict):
    """The stored record a row of `record_row` (or of the Parquet export) stands for."""
    data = {k: v for k, v in row.items() if k not in ("kind", "json_fields")}
    for name in row.get("json_fields") or ():
        data[name] = json.loads(data[name])
    if kind == "trajectory":
        s = dict(data["sample"])
        s.update(tokens=pack_ints(s["tokens"]), loss_mask=pack_mask(s["loss_mask"]), logprobs=pack_floats(s["logprobs"]), versions=pack_ints(s["versions"]))
        data["sample"] = s
    if kind == "environment":
        data["checks"] = [(c["name"], c["passed"], c["detail"]) if isinstance(c, dict) else tuple(c) for c in data["checks"]]
    if kind == "batch":
        data["entries"] = [[e["trajectory_key"], e["advantage"], e["reward"]] if isinstance(e, dict) else e for e in data["entries"]]
    record_type = RunState if kind == "state" else KINDS[kind][1]
    return msgspec.convert(data, record_type)


def iter_rows(store: Store, skipped: list[StoredRecordError]):
    for kind, (db, _) in KINDS.items():
        for record in tolerant(store, db, skipped):
            yield record_row(kind, record)
    state = tolerant_get(store, "meta", "state", skipped)
    if state is not None:
        yield record_row("state", state)


def export_run(store: Store, file: Path, skipped: list[StoredRecordError]) -> list[Path]:
    """Write the export; returns the files written."""
    if file.suffix == ".jsonl":
        with open(file, "w") as out:
            for row in iter_rows(store, skipped):
                out.write(json.dumps(row) + "\n")
        return [file]
    if file.suffix == ".parquet":
        return _export_parquet(store, file, skipped)
    raise InputError(f"--export {file}: name a .jsonl file (or a .parquet one, with pyarrow installed)")


def _export_parquet(store: Store, file: Path, skipped: list[StoredRecordError]) -> list[Path]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"--export {file}: Parquet needs pyarrow (pip install pyarrow); or export to a .jsonl file") from None
    rows: dict[str, list[dict]] = {}
    for row in iter_rows(store, skipped):
        if row["kind"] == "environment":  # Parquet columns hold one type: tuples of mixed types become structs
            row["checks"] = [{"name": n, "passed": p, "detail": d} for n, p, d in row["checks"]]
        if row["kind"] == "batch":
            row["entries"] = [{"trajectory_key": k, "advantage": a, "reward": r} for k, a, r in row["entries"]]
        row["json_fields"] = [k for k, v in row.items() if isinstance(v, dict) and k != "sample"]  # free-form maps
        for name in row["json_fields"]:
            row[name] = json.dumps(row[name])
        rows.setdefault(row["kind"], []).append(row)
    written = []
    for kind, items in rows.items():
        target = file.with_name(f"{file.stem}-{kind}.parquet")
        pq.write_table(pa.Table.from_pylist(items), target)
        written.append(target)
    return written


def read_parquet_rows(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()
