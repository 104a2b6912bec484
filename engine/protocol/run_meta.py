"""run.json: what a run records about itself besides its config, as one typed struct read and written here only.

    meta = read_run_meta(run_dir / "run.json")     # RunMeta; a missing file is an empty one
    meta.model_path, meta.argv, meta.placement ...
    write_run_meta(path, replace(meta, bus=...))   # atomically (a temporary file, then a rename)

Who writes what: `up` the model path, start time and argv (engine/cli.py) and the placement plan
(engine/tools/node_plan.py); the loop when its curriculum started (engine/run.py); the bus its socket counters
(engine/peers/bus.py); the hub the sandbox's isolation (engine/peers/hub.py) and the time-share counters; the
result checks their refusals (engine/peers/result_checks.py). The evaluation command and the benchmarks read it.

A file that is not this struct (hand-edited, truncated, or from another program) is refused with RunMetaError,
naming the file and the field. Keys this version does not know (a newer engine's) are ignored on reading.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from engine.protocol.errors import InputError


class RunMetaError(InputError, ValueError):
    """run.json could not be read as a RunMeta: the message names the file and the field. A ValueError too, so
    the readers that fall back when a run records no model (report, replay, curriculum signals) still do."""


class RunMeta(msgspec.Struct, kw_only=True):
    model_path: str | None = None  # the base model's folder (a hub id stands for its snapshot folder)
    started: str | None = None  # ISO time `up` started
    argv: list[str] = []  # `up`'s arguments
    curriculum_started: float | None = None  # Unix time the loop's first refresh began
    placement: dict | None = None  # the node plan (engine/protocol/placement.py plan_record / read_plan)
    sandbox_isolation: str | None = None  # the sandbox's isolation level as the workers report it
    sandbox_uncontained: list[str] = []  # what model-written code can still reach at that level
    bus: dict[str, dict[str, int | float]] = {}  # the bus's counters, by socket (engine/peers/bus.py)
    result_checks: dict[str, int] = {}  # refused results and dropped workers (engine/peers/result_checks.py)
    time_share: dict[str, int | float] = {}  # rounds, unanswered, slowest sleep (engine/peers/time_share.py)


def read_run_meta(path: str | Path) -> RunMeta:
    """The RunMeta in `path` (an empty one when there is no file); RunMetaError when the file is not one."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return RunMeta()
    except OSError as exc:
        raise RunMetaError(f"{path}: cannot read the run's record ({exc.strerror or exc})") from None
    try:
        return msgspec.json.decode(raw, type=RunMeta)
    except msgspec.DecodeError as exc:  # ValidationError is one: it names the field, as `$.field`
        raise RunMetaError(f"{path}: not a run record this engine wrote ({exc}); it is rewritten by `up`, "
                           "so restore it from the run's copy or start the run again") from None


def write_run_meta(path: str | Path, meta: RunMeta) -> None:
    """Write `meta` to `path` atomically (readers never see half a file)."""
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(msgspec.json.format(msgspec.json.encode(meta), indent=2))
    tmp.replace(path)


def update_run_meta(path: str | Path, **values) -> RunMeta:
    """Read, change the named fields (each checked against its type: RunMetaError names a wrong one), write back."""
    current = read_run_meta(path)
    unknown = sorted(set(values) - set(RunMeta.__struct_fields__))
    if unknown:
        raise RunMetaError(f"{path}: run.json has no field {', '.join(unknown)} (fields: {', '.join(RunMeta.__struct_fields__)})")
    try:
        changed = msgspec.convert({**msgspec.structs.asdict(current), **values}, RunMeta)
    except msgspec.ValidationError as exc:
        raise RunMetaError(f"{path}: {exc}") from None
    write_run_meta(path, changed)
    return changed


def require_model_path(path: str | Path) -> str:
    """The run's base model folder; RunMetaError when run.json does not name one."""
    meta = read_run_meta(path)
    if not meta.model_path:
        raise RunMetaError(f"{path}: the run's base model is not recorded (no model_path); was the run started with `up`?")
    return meta.model_path
