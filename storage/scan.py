"""Reading a store past its bad records: what `replay`, `inspect` and `report` use, so one record that does not
decode costs that record, not the whole command.

    skipped: list[StoredRecordError] = []
    for env in tolerant(store, "environments", skipped): ...      # the bad ones land in `skipped`, named by key
    for line in describe_skipped(skipped): print(line, file=sys.stderr)

`Store`'s own scans stop at the first bad record with a `StoredRecordError` (the engine, which writes the store,
must stop there); these scans read the same databases in one read transaction each (never blocking the writer)
and set each bad record aside. Damage below the records (a truncated file, a broken b-tree) is still
`StoreCorrupt` and still ends the scan: nothing past it can be trusted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from storage.records import StoredRecordError
from storage.store import Store, trajectory_prefix


def tolerant(store: Store, db: str, skipped: list[StoredRecordError], prefix: str = "") -> Iterator[Any]:
    """The records of database `db` whose keys start with `prefix`, in key order; a record that does not decode
    is appended to `skipped` (its error names the database and key) and the scan goes on."""
    return store._scan(db, prefix, skipped)


def tolerant_get(store: Store, db: str, key: str, skipped: list[StoredRecordError]) -> Any | None:
    """One record, or None when it is missing or bad (a bad one is appended to `skipped`)."""
    try:
        return store._get(db, key)
    except StoredRecordError as exc:
        skipped.append(exc)
        return None


def trajectories(store: Store, skipped: list[StoredRecordError], step: int | None = None) -> Iterator[Any]:
    return tolerant(store, "trajectories", skipped, "" if step is None else trajectory_prefix(step))


def describe_skipped(skipped: list[StoredRecordError], limit: int = 5) -> list[str]:
    """Warning lines for the records set aside: the first `limit` by name, then how many more."""
    lines = [f"warning: skipped a bad record: {exc}" for exc in skipped[:limit]]
    if len(skipped) > limit:
        lines.append(f"warning: skipped {len(skipped) - limit} more bad records")
    return lines
