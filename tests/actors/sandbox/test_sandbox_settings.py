"""The sandbox's typed seams: the pool's settings from the `[sandbox]` section, the worker's start-up config on
both sides of the process boundary, and the isolation levels' traits."""

import msgspec
import pytest

from actors.sandbox import isolation, protocol
from actors.sandbox.settings import SandboxSettings
from actors.sandbox.worker import WorkerConfig
from engine.protocol.config import Config


def test_settings_come_from_the_sandbox_section_with_overrides():
    section = Config().sandbox
    settings = SandboxSettings.from_config(section, workers=1)
    assert settings.workers == 1
    assert {name: getattr(settings, name) for name in settings.__struct_fields__ if name != "workers"} == \
        {name: getattr(section, name) for name in settings.__struct_fields__ if name != "workers"}


@pytest.mark.parametrize("field, value, message", [
    ("isolation", "chroot", r"^isolation must be one of \['auto', 'bubblewrap', 'rlimits', 'rlimits-unconfined-reads', 'unshare', "
                            r"'unshare-unconfined-reads'\]"),
    ("workers", 0, r"^workers must be a positive number, got 0$"),
    ("step_timeout_s", float("nan"), r"^step_timeout_s must be a positive number"),
])
def test_bad_settings_are_refused(field, value, message):
    with pytest.raises(ValueError, match=message):
        SandboxSettings(**{field: value})
    with pytest.raises(ValueError, match=message):
        msgspec.structs.replace(SandboxSettings(), **{field: value})


def test_the_worker_reads_exactly_the_fields_the_pool_sends():
    assert WorkerConfig.FIELDS == protocol.WorkerConfig.__struct_fields__
    sent = protocol.WorkerConfig(memory_mb=1, cpu_seconds=2, file_size_mb=3, open_files=4, max_output_bytes=5,
                                 allowed_modules=["math"], seccomp=True, die_with_parent=True, parent_pid=None,
                                 guard_writes=False, landlock=False)
    read = WorkerConfig(protocol.encode_worker_config(sent))
    assert {name: getattr(read, name) for name in WorkerConfig.FIELDS} == msgspec.structs.asdict(sent)
    with pytest.raises(ValueError, match="exactly the fields"):
        WorkerConfig('{"memory_mb": 1}')


def test_every_level_is_its_traits():
    for level, (wrapping, landlock, seccomp) in isolation.LEVELS.items():
        assert isolation.resolve_level(wrapping, seccomp, landlock) is level
        # the level's name lists what is in force, strongest part first
        assert str(level) == "+".join([wrapping.name] + ["landlock"] * landlock + ["seccomp"] * seccomp)
        assert level.protects_host_files == (wrapping.private_filesystem or landlock)
    assert not isolation.BUBBLEWRAP.guards_host_files and isolation.RLIMITS.watches_parent
