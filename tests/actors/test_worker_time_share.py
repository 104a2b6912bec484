"""Time-shared GPUs, the worker's side (actors/worker.py, actors/inference/batcher.py): on `Sleep` the worker puts its
backend to sleep after what is running and answers `Slept`; tasks that come meanwhile wait; on `WakeUp` it wakes
the backend and loads the version the engine published (its PolicyUpdate came first) before generating again.
The backend here records its calls: it stands in for vLLM's sleep(level=1) / wake_up() on a GPU."""

import trio

from engine.protocol.messages import PolicyUpdate, Shutdown, Sleep, Slept, WakeUp
from tests.actors.test_worker_versions import V1, ConcurrentVersionedBackend, VersionedBackend, _run, _task, _until, _versions


class Recording:
    """Mixed into the test backends: every call that touches the model, in order."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def sleep(self):
        self.calls.append("sleep")

    def wake_up(self):
        self.calls.append("wake_up")

    def load_weights(self, path, version):
        super().load_weights(path, version)
        self.calls.append(f"load v{version}")

    def _answer(self):
        self.calls.append(f"generate on v{self.policy_version}")
        return super()._answer()


class ThreadBackend(Recording, VersionedBackend):
    pass


class ConcurrentBackend(Recording, ConcurrentVersionedBackend):
    pass


def _engine(backend):
    async def engine(sock):
        await sock.inbox.send(PolicyUpdate(version=0, path=""))  # the answer to the hello
        await sock.inbox.send(Sleep(version=1))  # the learner is about to make v1
        await _until(lambda: any(isinstance(m, Slept) for m in sock.sent))
        await sock.inbox.send(_task("t1", 1))  # a task that comes while the engine sleeps waits
        await trio.sleep(0.5)
        assert not any(c.startswith("generate") for c in backend.calls), backend.calls
        await sock.inbox.send(PolicyUpdate(version=1, path=V1))
        await sock.inbox.send(WakeUp(version=1))
        await _until(lambda: sock.results())
        await sock.inbox.send(Shutdown())

    return engine


def _check(backend, sock):
    assert backend.calls[:3] == ["sleep", "wake_up", "load v1"], backend.calls
    assert set(backend.calls[3:]) == {"generate on v1"}
    (slept,) = [m for m in sock.sent if isinstance(m, Slept)]
    assert slept.worker_id == "w" and slept.seconds >= 0
    (result,) = sock.results()
    assert _versions(result) == {1}


def test_a_sleeping_worker_answers_slept_then_wakes_loads_and_generates_in_that_order():
    backend = ThreadBackend()
    sock = _run(backend, _engine(backend))
    _check(backend, sock)


def test_a_concurrent_backend_like_vllm_sleeps_and_wakes_in_the_same_order():
    backend = ConcurrentBackend()
    sock = _run(backend, _engine(backend))
    _check(backend, sock)


def test_a_second_sleep_is_answered_without_sleeping_again():
    backend = ThreadBackend()

    async def engine(sock):
        await sock.inbox.send(PolicyUpdate(version=0, path=""))
        await sock.inbox.send(Sleep(version=1))
        await sock.inbox.send(Sleep(version=-1))
        await _until(lambda: sum(isinstance(m, Slept) for m in sock.sent) == 2)
        await sock.inbox.send(WakeUp(version=0))
        await sock.inbox.send(WakeUp(version=0))
        await sock.inbox.send(_task("t0", 0))
        await _until(lambda: sock.results())
        await sock.inbox.send(Shutdown())

    _run(backend, engine)
    assert backend.calls[:2] == ["sleep", "wake_up"] and set(backend.calls[2:]) == {"generate on v0"}
