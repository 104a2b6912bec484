"""`replay --export`: every record, every field, back to the stored record; beside a live writer; past bad records."""

from __future__ import annotations

import json

import pytest

from engine.cli import main
from engine.tools.export import KINDS, record_from_row, read_parquet_rows
from storage.store import Store



def _stored(paths) -> dict[str, list]:
    store = Store.open(paths.store, readonly=True)
    try:
        found = {kind: list(store._scan(db)) for kind, (db, _) in KINDS.items()}
        found["state"] = [store.state()]
        return found
    finally:
        store.close()


def test_jsonl_export_round_trips_every_field(small_run, tmp_path, capsys):
    out = tmp_path / "all.jsonl"
    assert main(["replay", str(small_run.paths.root), "--export", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    back: dict[str, list] = {}
    for row in rows:
        back.setdefault(row["kind"], []).append(record_from_row(row["kind"], row))
    assert back == _stored(small_run.paths)
    trajectory = next(r for r in rows if r["kind"] == "trajectory" and r["role"] == "agent")
    assert trajectory["sample"]["tokens"] == [10, 11, 12, 13, 14, 15] and trajectory["sample"]["logprobs"][-1] == -0.5
    assert trajectory["sample"]["versions"] == [-1, -1, -1, 0, 0, 0] and trajectory["turns"][0]["parse_rule"] == "boxed_last"


def test_parquet_export_round_trips_every_field(small_run, tmp_path):
    pytest.importorskip("pyarrow")
    out = tmp_path / "all.parquet"
    assert main(["replay", str(small_run.paths.root), "--export", str(out)]) == 0
    stored = _stored(small_run.paths)
    for kind, records in stored.items():
        rows = read_parquet_rows(tmp_path / f"all-{kind}.parquet")
        assert [record_from_row(kind, r) for r in rows] == records, kind


def test_export_refuses_an_unknown_format(small_run, tmp_path, capsys):
    assert main(["replay", str(small_run.paths.root), "--export", str(tmp_path / "x.csv")]) == 2
    assert "error: --export" in capsys.readouterr().err


WRITER = """
import sys
from engine.protocol.messages import Sample, pack_floats, pack_ints, pack_mask
from storage.records import TrajectoryRecord
from storage.store import Store
sample = Sample(sample_id="late", role="agent", env_id="e", skill="s", arm="no_hint", step=5, tokens=pack_ints([1]), loss_mask=pack_mask([1]),
                logprobs=pack_floats([0.0]), versions=pack_ints([0]), reward=1.0)
store = Store.open(sys.argv[1])
with store.batch() as batch:
    batch.put_trajectory(TrajectoryRecord(sample_id="late", role="agent", env_id="e", skill="s", arm="no_hint", step=5, seed=0,
                         status="completed", failure="", episode_return=1.0, turns=[], sample=sample, created_at=0.0))
store.close()
print("committed")
"""


def test_export_reads_while_the_engine_writes(small_run):
    """An export holds an LMDB read transaction; the engine (another process) commits beside it, never blocked."""
    import subprocess
    import sys
    from pathlib import Path

    from engine.tools.export import iter_rows

    reader = Store.open(small_run.paths.store, readonly=True)
    try:
        rows = iter_rows(reader, [])
        first = next(rows)  # a read transaction is open now
        repo = Path(__file__).resolve().parents[3]
        result = subprocess.run([sys.executable, "-c", WRITER, str(small_run.paths.store)], cwd=repo, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and result.stdout.strip() == "committed", result.stderr
        rest = list(rows)
        assert first["kind"] == "environment" and len(rest) > 5
    finally:
        reader.close()
    again = Store.open(small_run.paths.store, readonly=True)
    try:
        assert again.trajectory("00000005/late") is not None  # the writer's commit, seen by a new reader
    finally:
        again.close()


def test_a_bad_record_is_named_and_the_rest_exported_and_the_command_fails(small_run, tmp_path, capsys):
    store = Store.open(small_run.paths.store)
    with store._env.begin(write=True) as txn:
        txn.put(b"00000000/broken", b"\x93not a record", db=store._dbs["trajectories"])
    store.close()
    out = tmp_path / "all.jsonl"
    assert main(["replay", str(small_run.paths.root), "--export", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "1 damaged record, the first: record '00000000/broken' in database 'trajectories' is corrupt" in err and "(step 0)" in err
    kinds = [json.loads(line)["kind"] for line in out.read_text().splitlines()]
    assert kinds.count("trajectory") == 11 and "state" in kinds  # 3 designs + 8 plays: the rest is all there
