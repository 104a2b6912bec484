"""Reading a store past its bad records: what `replay`, `inspect` and `report` use, so one record that does not
decode costs that record, not the whole command.

    skipped: list[StoredRecordError] = []
    for env in tolerant(store, "environments", skipped): ...      # the bad ones land in `skipped`, named by key
    for line in describe_skipped(skipped): print(line, file=sys.stderr)
    problems = check_records(store)      # every record decoded and under the key its own fields give

`Store`'s own scans stop at the first bad record with a `StoredRecordError` (the engine, which writes the store,
must stop there); these scans read the same databases in one read transaction each (never blocking the writer)
and set each bad record aside. Damage below the records (a truncated file, a broken b-tree) is still
`StoreCorrupt` and still ends the scan: nothing past it can be trusted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from storage.records import StoredRecordError
from storage.store import _DAMAGE, DATABASES, Store, trajectory_key, trajectory_prefix


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


def _expected_key(db: str, record: Any) -> str | None:
    """The key a record of `db` is written under (storage/store.py `put_*`); None where any key will do."""
    if db in ("environments", "memory", "designer_rewards"):
        return record.env_id
    if db == "trajectories":
        return trajectory_key(record.step, record.sample_id)
    if db == "batches":
        return f"{record.version:08d}"
    if db == "meta":
        return "state"
    return None


def _step_of(db: str, key: str, record: Any = None) -> str:
    if record is not None and isinstance(getattr(record, "step", None), int):
        return f" (step {record.step})"
    head = key.split("/", 1)[0]
    return f" (step {int(head)})" if db == "trajectories" and head.isdigit() else ""


def check_records(store: Store) -> list[StoredRecordError]:
    """Every record of every database, each decoded and checked to sit under the key its own fields give (a
    scrambled key hides a record from every scan by step or id, so a damaged run would read as an empty one), and
    the run state present wherever anything else is. Each problem names its database, key and step."""
    problems: list[StoredRecordError] = []
    counts = {}
    try:
        _check_all(store, problems, counts)
    except _DAMAGE as exc:  # below the records (pages): what the store's own scans report too
        raise store._damaged("checking its records", exc) from exc
    if counts["meta"] == 0 and any(counts[db] for db in ("trajectories", "batches", "environments")):
        problems.append(StoredRecordError("the run state (database 'meta', key 'state') is missing while the store holds records"))
    return problems


def _check_all(store: Store, problems: list[StoredRecordError], counts: dict[str, int]) -> None:
    with store._env.begin() as txn:  # one read transaction: one snapshot, each record read once
        for db in DATABASES:
            counts[db] = 0
            for key_bytes, value in txn.cursor(db=store._dbs[db]):
                counts[db] += 1
                key = bytes(key_bytes).decode(errors="replace")
                try:
                    record = store._decode(db, bytes(key_bytes), bytes(value))
                except StoredRecordError as exc:
                    problems.append(StoredRecordError(f"{exc}{_step_of(db, key)}"))
                    continue
                expected = _expected_key(db, record)
                if expected is not None and expected.encode() != bytes(key_bytes):
                    problems.append(StoredRecordError(
                        f"record {key!r} in database {db!r} is under the wrong key (its fields say {expected!r}){_step_of(db, key, record)}"))


def damage_line(where, problems: list[StoredRecordError]) -> str:
    """One line for a store (at `where`) with damaged records: how many, the first named, and the fix."""
    by_record: dict[str, str] = {}  # one per record: a scan and check_records may both have named it
    for p in problems:
        text = str(p)
        match = re.match(r"record '.*?' in database '\w+'", text)
        by_record.setdefault(match.group(0) if match else text, text)
    unique = list(by_record.values())
    more = f" (and {len(unique) - 1} more)" if len(unique) > 1 else ""
    return (f"{where}: {len(unique)} damaged record{'s' if len(unique) != 1 else ''}{more}, the first: {unique[0]}; "
            "what could be read was used, but the run is not whole")
