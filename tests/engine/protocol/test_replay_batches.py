"""The replay --train batch file (engine/protocol/replay_batches.py): what the engine writes the learner reads back
typed, and anything else is one InputError."""

import msgspec
import pytest

from engine.protocol.errors import InputError
from engine.protocol.messages import TrainBatch
from engine.protocol.replay_batches import ReplayBatches, read_batches, write_batches


def test_written_batches_read_back_typed(tmp_path):
    file = tmp_path / "batches.msgpack"
    data = ReplayBatches(run_dir="/r", model_path="/m", start_version=1, checkpoint="/r/checkpoints/step-000000", first_version=2,
                         batches=[(1, TrainBatch(step=0, samples=[], checkpoint=False)), (2, TrainBatch(step=1, samples=[], checkpoint=False))])
    write_batches(file, data)
    assert read_batches(file) == data
    assert msgspec.msgpack.decode(file.read_bytes())["first_version"] == 2  # a map by field name, readable untyped too


def test_a_file_of_another_shape_is_an_input_error(tmp_path):
    file = tmp_path / "batches.msgpack"
    file.write_bytes(msgspec.msgpack.encode({"run_dir": "/r", "batches": "no"}))
    with pytest.raises(InputError, match="is not a replay batch file"):
        read_batches(file)
    with pytest.raises(InputError, match="cannot read"):
        read_batches(tmp_path / "missing")
