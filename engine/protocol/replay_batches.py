"""OUT/batches.msgpack: what `replay --train` hands from its engine half (engine/tools/replay.py, which reads the
store) to its learner half (learner/replay.py, which trains), one typed file both sides agree on.

    write_batches(out / "batches.msgpack", ReplayBatches(...))    # the engine side
    data = read_batches(file)                                      # the learner side: InputError for a bad file
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from engine.protocol.errors import InputError
from engine.protocol.messages import TrainBatch


class ReplayBatches(msgspec.Struct, kw_only=True):
    run_dir: str
    model_path: str
    start_version: int  # the policy version of `checkpoint` (0: the base model)
    checkpoint: str  # "" for the base model
    first_version: int  # the first batch compared; the ones before it only bring the weights there
    batches: list[tuple[int, TrainBatch]]  # (the policy version that trained it, the batch as the engine sent it)


def write_batches(file: Path, data: ReplayBatches) -> None:
    file.write_bytes(msgspec.msgpack.encode(data))


def read_batches(file: Path) -> ReplayBatches:
    try:
        return msgspec.msgpack.decode(file.read_bytes(), type=ReplayBatches)
    except OSError as exc:
        raise InputError(f"cannot read {file} ({exc.strerror or exc}): export it with `replay RUN_DIR --train`") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InputError(f"{file} is not a replay batch file ({exc}): export it again with `replay RUN_DIR --train`") from None
