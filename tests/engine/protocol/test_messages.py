"""The wire messages: every type round-trips through its union, and a bad message is refused naming the field."""

import typing

import msgspec
import pytest
import zmq

from engine.protocol.messages import (
    DesignResult,
    DesignTask,
    EngineToLearner,
    FetchChunk,
    FetchFailed,
    FetchManifest,
    FetchRunInfo,
    EngineToWorker,
    Heartbeat,
    HelloAgain,
    LearnerFailed,
    LearnerHello,
    LearnerToEngine,
    MemoryExample,
    PlayResult,
    PlayTask,
    PolicyChunk,
    PolicyFile,
    PolicyManifest,
    PolicyPublished,
    PolicyUpdate,
    RunInfo,
    Sample,
    Shutdown,
    Sleep,
    Slept,
    TaskFailed,
    TrainBatch,
    TurnRecord,
    ValidateResult,
    ValidateTask,
    WorkerBye,
    WakeUp,
    WorkerHello,
    WorkerToEngine,
)
from engine.protocol.transport import MessageSocket, ProtocolError
from engine.protocol.messages import pack_floats, pack_ints, pack_mask

UNIONS = {
    "WorkerToEngine": WorkerToEngine,
    "EngineToWorker": EngineToWorker,
    "LearnerToEngine": LearnerToEngine,
    "EngineToLearner": EngineToLearner,
}


def _members(union):
    return typing.get_args(union)


def _all_message_types():
    seen = []
    for union in UNIONS.values():
        for cls in _members(union):
            if cls not in seen:
                seen.append(cls)
    return seen


def _sample(role="agent", arm="hint"):
    return Sample(
        sample_id="s-1", role=role, env_id="e-1", skill="logic", arm=arm, step=3,
        tokens=pack_ints([5, -7, 2**31 - 1]), loss_mask=pack_mask([0, 1, 1]), logprobs=pack_floats([0.0, -0.5, -2.25]),
        versions=pack_ints([-1, 2, 3]), reward=0.75, advantage=-1.5, temperature=0.7,
    )


def _wire_dict(message):
    """The message as msgpack carries it (bytes stay bytes), as plain dicts and lists."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(message))


# One instance of every message type; non-default values where a field has a default, so the round trip is checked
# on every field.
EXAMPLES = {
    WorkerHello: WorkerHello(worker_id="w1", pid=123, slots=4, isolation="bwrap", backend="transformers", policy_version=2),
    Heartbeat: Heartbeat(worker_id="w1", policy_version=2, busy=3),
    DesignResult: DesignResult(
        task_id="t1", worker_id="w1", skill="logic", passage_id="p7", attempt=1, reply="```python\nclass AEnv: ...\n```",
        code="class AEnv: ...", valid=False, reason="reset failed", checks=[("syntax", True, ""), ("reset", False, "boom")],
        hint="think", designer=_sample("designer", "design"), tokens_generated=321, seconds=1.25,
    ),
    PlayResult: PlayResult(
        task_id="t2", worker_id="w1", env_id="e-1", arm="no_hint", seed=99, status="truncated", failure="",
        episode_return=-0.5,
        turns=[TurnRecord(action="left", parse_rule="boxed_last", reward=0.5, terminated=False, truncated=True, policy_version=2, observation_chars=40)],
        agent=_sample("agent", "no_hint"), tokens_generated=64, seconds=0.5,
    ),
    TaskFailed: TaskFailed(task_id="t3", worker_id="w1", reason="sandbox timeout"),
    WorkerBye: WorkerBye(worker_id="w1"),
    DesignTask: DesignTask(
        task_id="t4", skill="logic", skill_description="deduce", passage_id="p1", passage="Once upon a time",
        examples=[MemoryExample(skill="logic", win_rate=0.5, regret=0.25, code="class BEnv: ...", name="BEnv")],
        negatives=["too easy (win_rate=0.95): class FooEnv"], attempt=2, step=4, setting="tool_use",
    ),
    PlayTask: PlayTask(task_id="t5", env_id="e-1", skill="logic", code="class AEnv: ...", hint="", arm="hint", seed=7, step=4, setting="tool_use"),
    PolicyUpdate: PolicyUpdate(version=3, path="/run/policy/3"),
    HelloAgain: HelloAgain(),
    Shutdown: Shutdown(reason="done"),
    LearnerHello: LearnerHello(pid=456, policy_version=0, policy_path="/run/policy/0", token="secret"),
    FetchRunInfo: FetchRunInfo(worker_id="w1"),
    FetchManifest: FetchManifest(version=3),
    FetchChunk: FetchChunk(version=3, file="model.safetensors", offset=524288, receipts=[7, 8]),
    RunInfo: RunInfo(config="[run]\nsteps = 3\n", model_path="/models/tiny", policy_version=3, policy_path="/run/policy/v000003"),
    PolicyManifest: PolicyManifest(version=3, files=[PolicyFile(name="adapter_config.json", size=12, sha256="ab" * 32)], chunk_bytes=524288),
    PolicyChunk: PolicyChunk(version=3, file="adapter_config.json", offset=0, data=b"{}\x00\xff", ticket=2**62),
    FetchFailed: FetchFailed(version=2, reason="pruned"),
    PolicyPublished: PolicyPublished(version=4, path="/run/policy/4", step=3, metrics={"loss": 0.125, "kl": 0.0}),
    LearnerFailed: LearnerFailed(reason="CUDA out of memory"),
    TrainBatch: TrainBatch(step=3, samples=[_sample(), _sample("designer", "design")], checkpoint=True),
    ValidateTask: ValidateTask(task_id="t6", env_id="t4", skill="logic", code="class AEnv: ...", hint="think", author="w1", step=4),
    ValidateResult: ValidateResult(
        task_id="t6", worker_id="w2", env_id="t4", valid=False, reason="reset failed", checks=[("reset", False, "boom")],
        sandbox="other_worker", seconds=0.25,
    ),
    Sleep: Sleep(version=5),
    Slept: Slept(worker_id="w3", seconds=1.5),
    WakeUp: WakeUp(version=5),
}


def test_every_message_type_has_an_example():
    assert set(EXAMPLES) == set(_all_message_types())


@pytest.mark.parametrize("union_name", list(UNIONS))
def test_every_message_round_trips_through_its_union(union_name):
    union = UNIONS[union_name]
    encoder = msgspec.msgpack.Encoder()
    decoder = msgspec.msgpack.Decoder(union)
    for cls in _members(union):
        message = EXAMPLES[cls]
        decoded = decoder.decode(encoder.encode(message))
        assert type(decoded) is cls
        assert decoded == message


def test_the_wire_form_carries_the_tag_in_the_type_field():
    for cls, message in EXAMPLES.items():
        assert _wire_dict(message)["type"] == cls.__struct_config__.tag


def test_tags_are_unique_and_all_use_the_type_field():
    types = _all_message_types()
    tags = [cls.__struct_config__.tag for cls in types]
    assert all(isinstance(tag, str) and tag for tag in tags)
    assert len(set(tags)) == len(tags), tags
    assert {cls.__struct_config__.tag_field for cls in types} == {"type"}


def test_only_shutdown_is_shared_between_unions():
    owners = {}
    for name, union in UNIONS.items():
        for cls in _members(union):
            owners.setdefault(cls, []).append(name)
    shared = {cls: names for cls, names in owners.items() if len(names) > 1}
    assert shared == {Shutdown: ["EngineToWorker", "EngineToLearner"]}


@pytest.mark.parametrize("union_name", list(UNIONS))
def test_a_message_of_another_direction_is_rejected(union_name):
    union = UNIONS[union_name]
    decoder = msgspec.msgpack.Decoder(union)
    foreign = [cls for cls in EXAMPLES if cls not in _members(union)]
    assert foreign
    for cls in foreign:
        tag = cls.__struct_config__.tag
        with pytest.raises(msgspec.ValidationError, match=rf"^Invalid value '{tag}' - at `\$\.type`$"):
            decoder.decode(msgspec.msgpack.encode(EXAMPLES[cls]))


def _raw(message, **changes):
    """The message's wire form as a dict, with fields replaced (or removed where the value is ...)."""
    raw = _wire_dict(message)
    for key, value in changes.items():
        if value is ...:
            del raw[key]
        else:
            raw[key] = value
    return msgspec.msgpack.encode(raw)


@pytest.mark.parametrize(
    "union, message, field",
    [
        (WorkerToEngine, EXAMPLES[Heartbeat], "policy_version"),
        (WorkerToEngine, EXAMPLES[PlayResult], "agent"),
        (EngineToWorker, EXAMPLES[PolicyUpdate], "path"),
        (EngineToWorker, EXAMPLES[DesignTask], "examples"),
        (LearnerToEngine, EXAMPLES[PolicyPublished], "metrics"),
        (EngineToLearner, EXAMPLES[TrainBatch], "samples"),
    ],
)
def test_a_missing_required_field_is_named(union, message, field):
    with pytest.raises(msgspec.ValidationError, match=rf"^Object missing required field `{field}`$"):
        msgspec.msgpack.Decoder(union).decode(_raw(message, **{field: ...}))


def test_a_missing_type_field_is_rejected():
    with pytest.raises(msgspec.ValidationError, match=r"missing required field `type`"):
        msgspec.msgpack.Decoder(EngineToWorker).decode(_raw(EXAMPLES[PolicyUpdate], type=...))


def test_omitted_defaulted_fields_take_their_defaults():
    decoder = msgspec.msgpack.Decoder(EngineToWorker)
    assert decoder.decode(_raw(EXAMPLES[PlayTask], setting=...)).setting == "games"
    assert decoder.decode(msgspec.msgpack.encode({"type": "shutdown"})) == Shutdown()


@pytest.mark.parametrize(
    "union, message, field, value, expected",
    [
        (WorkerToEngine, EXAMPLES[Heartbeat], "busy", "3", r"Expected `int`, got `str` - at `\$\.busy`"),
        (WorkerToEngine, EXAMPLES[WorkerHello], "worker_id", 1, r"Expected `str`, got `int` - at `\$\.worker_id`"),
        (EngineToWorker, EXAMPLES[PlayTask], "arm", "bogus", r"Invalid enum value 'bogus' - at `\$\.arm`"),
        (EngineToWorker, EXAMPLES[PolicyUpdate], "version", 1.5, r"Expected `int`, got `float` - at `\$\.version`"),
        (LearnerToEngine, EXAMPLES[PolicyPublished], "metrics", {"loss": "high"}, r"Expected `float`, got `str` - at `\$\.metrics\[\.\.\.\]`"),
        (EngineToLearner, EXAMPLES[TrainBatch], "checkpoint", 1, r"Expected `bool`, got `int` - at `\$\.checkpoint`"),
    ],
)
def test_a_wrong_field_type_is_named(union, message, field, value, expected):
    with pytest.raises(msgspec.ValidationError, match=rf"^{expected}$"):
        msgspec.msgpack.Decoder(union).decode(_raw(message, **{field: value}))


def test_a_wrong_type_inside_a_nested_sample_names_its_path():
    raw = _wire_dict(EXAMPLES[PlayResult])
    raw["agent"]["tokens"] = "not bytes"
    with pytest.raises(msgspec.ValidationError, match=r"^Expected `bytes`, got `str` - at `\$\.agent\.tokens`$"):
        msgspec.msgpack.Decoder(WorkerToEngine).decode(msgspec.msgpack.encode(raw))
    raw = _wire_dict(EXAMPLES[TrainBatch])
    raw["samples"][1]["role"] = "critic"
    with pytest.raises(msgspec.ValidationError, match=r"^Invalid enum value 'critic' - at `\$\.samples\[1\]\.role`$"):
        msgspec.msgpack.Decoder(EngineToLearner).decode(msgspec.msgpack.encode(raw))


@pytest.fixture
def worker_socket():
    """The engine's side of the workers socket, unbound: only its decoding is exercised."""
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    wrapped = MessageSocket(sock, WorkerToEngine, zmq.ROUTER)
    yield wrapped
    wrapped.close()


def test_the_transport_turns_bad_messages_into_protocol_errors_naming_the_field(worker_socket):
    assert worker_socket._decode(msgspec.msgpack.encode(EXAMPLES[Heartbeat])) == EXAMPLES[Heartbeat]
    cases = [
        (_raw(EXAMPLES[Heartbeat], busy="3"), r"Expected `int`, got `str` - at `\$\.busy`$"),
        (_raw(EXAMPLES[TaskFailed], reason=...), r"Object missing required field `reason`$"),
        (msgspec.msgpack.encode(EXAMPLES[PolicyUpdate]), r"Invalid value 'policy_update' - at `\$\.type`$"),
        (msgspec.msgpack.encode(EXAMPLES[Heartbeat])[:-1], r"truncated"),
    ]
    for payload, detail in cases:
        with pytest.raises(ProtocolError, match=rf"^undecodable message \({len(payload)} bytes\): .*{detail}"):
            worker_socket._decode(payload)


def test_peer_chosen_names_and_slots_are_bounded():
    """A huge worker id never decodes (so it is never echoed in a log line), nor a hello whose slots would break
    the dispatcher's arithmetic."""
    decoder = msgspec.msgpack.Decoder(WorkerToEngine)
    with pytest.raises(msgspec.ValidationError, match=r"length <= 128"):
        decoder.decode(_raw(EXAMPLES[Heartbeat], worker_id="w" * 100_000))
    for slots in (0, -1, 10**9):
        with pytest.raises(msgspec.ValidationError, match=r"at `\$\.slots`"):
            decoder.decode(_raw(EXAMPLES[WorkerHello], slots=slots))
