"""The engine lifeline: telling alive, dead and zombie processes apart, and waiting until the engine is gone."""

import os
import subprocess
import sys
import time

import trio

from engine.protocol.lifeline import ENGINE_PID_ENV, engine_pid, is_alive, until_engine_gone


def test_alive_dead_and_zombie_processes(monkeypatch):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while is_alive(child.pid) and time.monotonic() < deadline:  # exited but not reaped: a zombie is not alive
        time.sleep(0.05)
    assert not is_alive(child.pid)
    child.wait()
    assert not is_alive(child.pid)

    assert is_alive(os.getpid())
    monkeypatch.setenv(ENGINE_PID_ENV, "123")
    assert engine_pid() == 123
    monkeypatch.setenv(ENGINE_PID_ENV, "")
    assert engine_pid() is None


def test_until_engine_gone_returns_when_the_process_ends():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])

    async def main():
        with trio.fail_after(30):
            await until_engine_gone(child.pid, interval_s=0.05)

    trio.run(main)
    child.wait()
