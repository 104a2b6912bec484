"""Packed sample arrays: ints, floats and masks round-trip on the wire, and check_sample names a misaligned array."""

import msgspec
import numpy as np
import pytest

from engine.protocol.sample_values import check_sample
from engine.protocol.messages import Sample, TurnRecord, pack_floats, pack_ints, pack_mask, unpack_floats, unpack_ints, unpack_mask
from storage.records import (
    SCHEMA_VERSION,
    BatchEntry,
    BatchRecord,
    DesignerRewardRecord,
    EnvironmentRecord,
    MemoryRecord,
    RunState,
    TrajectoryRecord,
)


def _sample(tokens=(11, 12, 13, 14), mask=(0, 0, 1, 1), logprobs=(0.0, 0.0, -0.5, -1.25), versions=(-1, -1, 4, 5), sample_id="s7"):
    return Sample(
        sample_id=sample_id, role="agent", env_id="e", skill="logic", arm="no_hint", step=1,
        tokens=pack_ints(tokens), loss_mask=pack_mask(mask), logprobs=pack_floats(logprobs), versions=pack_ints(versions), reward=1.0,
    )


def test_ints_round_trip_including_negative_and_int32_extremes():
    values = [0, 1, -1, 42, -123456, 2**31 - 1, -(2**31)]
    packed = pack_ints(values)
    assert len(packed) == 4 * len(values)
    unpacked = unpack_ints(packed)
    assert unpacked.dtype == np.dtype("<i4")
    assert unpacked.tolist() == values


def test_ints_are_little_endian_int32_on_the_wire():
    assert pack_ints([1, -1, 256]) == b"\x01\x00\x00\x00" b"\xff\xff\xff\xff" b"\x00\x01\x00\x00"


def test_ints_accept_numpy_arrays_of_other_int_widths():
    assert unpack_ints(pack_ints(np.array([3, -4, 5], dtype=np.int64))).tolist() == [3, -4, 5]


def test_an_int_outside_int32_is_refused_not_wrapped():
    with pytest.raises(OverflowError):
        pack_ints([2**31])


def test_floats_round_trip_as_float32():
    values = [0.0, -0.5, -1.25, 3.0, -1e-3, -80.0]
    packed = pack_floats(values)
    assert len(packed) == 4 * len(values)
    unpacked = unpack_floats(packed)
    assert unpacked.dtype == np.dtype("<f4")
    assert unpacked[:4].tolist() == [0.0, -0.5, -1.25, 3.0]  # exactly representable in float32
    np.testing.assert_allclose(unpacked, values, rtol=1e-6)
    assert pack_floats([1.0]) == b"\x00\x00\x80\x3f"  # little-endian IEEE single


def test_mask_round_trips_one_byte_per_entry():
    values = [0, 1, 1, 0, 1]
    packed = pack_mask(values)
    assert packed == b"\x00\x01\x01\x00\x01"
    unpacked = unpack_mask(packed)
    assert unpacked.dtype == np.uint8
    assert unpacked.tolist() == values
    assert pack_mask([True, False]) == b"\x01\x00"


def test_empty_arrays_round_trip():
    assert pack_ints([]) == pack_floats([]) == pack_mask([]) == b""
    assert unpack_ints(b"").size == unpack_floats(b"").size == unpack_mask(b"").size == 0


def test_check_sample_accepts_aligned_arrays():
    check_sample(_sample())
    check_sample(_sample(tokens=[], mask=[], logprobs=[], versions=[]))


@pytest.mark.parametrize(
    "field, value, name, entries",
    [
        ("loss_mask", pack_mask([0, 1, 1]), "loss_mask", 3),
        ("loss_mask", pack_mask([0, 1, 1, 1, 1]), "loss_mask", 5),
        ("logprobs", pack_floats([0.0, 0.0, -0.5, -1.0, -2.0]), "logprobs", 5),
        ("logprobs", b"", "logprobs", 0),
        ("versions", pack_ints([-1, 4]), "versions", 2),
        ("versions", pack_ints([-1, -1, 4, 5, 6, 7]), "versions", 6),
    ],
)
def test_check_sample_names_the_array_that_does_not_match_the_tokens(field, value, name, entries):
    broken = msgspec.structs.replace(_sample(), **{field: value})
    with pytest.raises(ValueError, match=rf"^sample s7: {name} has {entries} entries for 4 tokens$"):
        check_sample(broken)


def test_check_sample_measures_against_the_token_count():
    # the other arrays agree with each other, the tokens are what is off
    broken = msgspec.structs.replace(_sample(), tokens=pack_ints([11, 12]))
    with pytest.raises(ValueError, match=r"^sample s7: loss_mask has 4 entries for 2 tokens$"):
        check_sample(broken)


def test_check_sample_reports_the_first_mismatch_in_field_order():
    broken = msgspec.structs.replace(_sample(), loss_mask=pack_mask([1]), versions=pack_ints([1]))
    with pytest.raises(ValueError, match=r"^sample s7: loss_mask has 1 entries"):
        check_sample(broken)


@pytest.mark.parametrize("field", ["tokens", "logprobs", "versions"])
def test_check_sample_rejects_a_partial_4_byte_entry(field):
    sample = _sample()
    broken = msgspec.structs.replace(sample, **{field: getattr(sample, field) + b"\x00"})
    with pytest.raises(ValueError, match=rf"^sample s7: {field} holds \d+ bytes, not a whole number of 4-byte entries$"):
        check_sample(broken)


def test_record_structs_round_trip_with_the_schema_version():
    sample = _sample()
    records = [
        EnvironmentRecord(
            env_id="e", skill="logic", step_created=2, source="designed", passage_id="p", attempt=1, code="class AEnv: ...",
            reply="r", hint="h", valid=False, reason="reset failed", checks=[("reset", False, "boom")], designer_sample_id="d",
            worker_id="w", created_at=12.5,
        ),
        TrajectoryRecord(
            sample_id="s7", role="agent", env_id="e", skill="logic", arm="no_hint", step=1, seed=3, status="completed",
            failure="", episode_return=1.0,
            turns=[TurnRecord(action="a", parse_rule="boxed_first", reward=1.0, terminated=True, truncated=False, policy_version=4, observation_chars=9)],
            sample=sample, created_at=1.0,
        ),
        MemoryRecord(env_id="e", skill="logic", name="AEnv", code="class AEnv: ...", win_rate=0.5, regret=0.25, step=2, source="seed"),
        DesignerRewardRecord(
            env_id="e", skill="logic", designer_sample_id="d", env_step=2, reward_step=4, variant="regret", regret=0.25,
            win_rate=0.5, raw_reward=0.25, advantage=0.1, hint_return=1.0, no_hint_return=0.75,
        ),
        BatchRecord(version=3, step=2, checkpoint=True, entries=[BatchEntry("2/s7", 0.5, 1.0)]),
        RunState(steps_done=2, batches=3, policy_version=3, active_env_ids=["e"], refresh_step=2, isolation="bwrap", finished=True),
    ]
    for record in records:
        assert record.v == SCHEMA_VERSION
        decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(record), type=type(record))
        assert decoded == record
    assert unpack_ints(msgspec.msgpack.decode(msgspec.msgpack.encode(records[1]), type=TrajectoryRecord).sample.tokens).tolist() == [11, 12, 13, 14]


def test_batch_entries_are_stored_as_compact_arrays():
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(BatchEntry("1/x", -0.5, 2.0))) == ["1/x", -0.5, 2.0]


def test_run_state_defaults_describe_a_fresh_run():
    state = RunState()
    assert (state.steps_done, state.batches, state.policy_version, state.active_env_ids, state.refresh_step, state.finished) == (0, 0, 0, [], -1, False)
    assert RunState().active_env_ids is not state.active_env_ids
