"""The ipc worker socket's gate: a hello counts only with the run's ipc secret (engine/peers/auth.py HelloGate,
engine/protocol/keys.py), made owner-only in the run's keys folder and kept across a resume."""

import pytest

from engine.peers.auth import HelloGate
from engine.protocol.keys import BadKey, ensure_ipc_secret, read_ipc_secret
from engine.protocol.messages import WorkerHello


def _hello(secret: str) -> WorkerHello:
    return WorkerHello(worker_id="w", pid=1, slots=1, isolation="", backend="", policy_version=0, secret=secret)


def test_only_a_hello_with_the_runs_secret_is_admitted(tmp_path):
    secret = ensure_ipc_secret(tmp_path / "keys")
    assert (tmp_path / "keys" / "ipc.secret").stat().st_mode & 0o777 == 0o600 and (tmp_path / "keys").stat().st_mode & 0o777 == 0o700
    assert ensure_ipc_secret(tmp_path / "keys") == secret == read_ipc_secret(tmp_path / "keys")  # kept: attached workers stay valid
    gate = HelloGate(secret)
    assert gate.admit(_hello(secret))
    assert not gate.admit(_hello("")) and not gate.admit(_hello("0" * 64))
    assert gate.counters["refused_hellos"] == 2
    assert HelloGate(None).admit(_hello(""))  # a tcp socket: CURVE decides who gets this far


def test_a_worker_without_the_secret_file_gets_one_line_naming_it(tmp_path):
    with pytest.raises(BadKey, match=r"ipc.secret cannot be read .*needs the run's secret; run it as the user who started `up`"):
        read_ipc_secret(tmp_path / "keys")
