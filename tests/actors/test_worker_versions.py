"""A task starts on the policy version it names (`min_policy_version`): the worker (actors/worker.py) loads that
version before the task's first token, waiting for a PolicyUpdate still on its way, so at `run.max_staleness = 0`
no play is generated on the version before and then dropped as stale."""

import threading
from pathlib import Path

import trio
import trio.testing

from actors.inference.base import Generation, InferenceBackend
from actors.sandbox import open_sandbox_pool
from actors.worker import WorkerOptions, _serve
from engine.protocol.config_loading import load_config
from engine.protocol.messages import PlayResult, PlayTask, PolicyUpdate, Shutdown, unpack_ints, unpack_mask
from tests.actors.agent_helpers import FakeTokenizer

PICK = (Path(__file__).parents[1] / "e2e" / "data" / "pick_env.py").read_text()
V1 = str(Path(__file__).parent)  # a folder that exists here, so the worker loads "v1" from it instead of fetching it


class VersionedBackend(InferenceBackend):
    """Answers every request with a pick; records the version each generate call ran on and each load."""

    name = "versioned"

    def __init__(self):
        self.generated_on: list[int] = []
        self.loads: list[tuple[str, int]] = []
        self.release_load = threading.Event()  # a test holds a load (in the batcher's thread) until it sets this
        self.release_load.set()

    @property
    def tokenizer(self):
        return FakeTokenizer()

    def _answer(self) -> Generation:
        self.generated_on.append(self.policy_version)
        ids = [ord(c) for c in "\\boxed{1}"]
        return Generation(completion_ids=ids, logprobs=[-0.5] * len(ids), text="\\boxed{1}", finish_reason="stop", policy_version=self.policy_version)

    def generate(self, requests):
        return [self._answer() for _ in requests]

    def load_weights(self, path, version):
        if not self.release_load.wait(timeout=20):
            raise TimeoutError("the test never released the load")
        self.loads.append((path, version))
        self.policy_version = version


class ConcurrentVersionedBackend(VersionedBackend):
    """Natively concurrent, like vLLM: the batcher hands it each request as it comes."""

    async def generate_async(self, request):
        return self._answer()


class FakeSocket:
    """The worker's DEALER socket: what the worker sends is kept, what the test puts in is received in order."""

    def __init__(self):
        self.sent: list = []
        self.inbox, self._outbox = trio.open_memory_channel(100)

    async def send(self, message) -> None:
        self.sent.append(message)

    async def receive(self):
        return await self._outbox.receive()

    def results(self) -> list[PlayResult]:
        return [m for m in self.sent if isinstance(m, PlayResult)]


def _task(task_id: str, version: int) -> PlayTask:
    return PlayTask(task_id=task_id, env_id="e", skill="s", code=PICK, hint="", arm="no_hint", seed=1, step=0, min_policy_version=version)


def _versions(result: PlayResult) -> set[int]:
    mask = unpack_mask(result.agent.loss_mask)
    return set(unpack_ints(result.agent.versions)[mask == 1].tolist())


def _run(backend, engine, *overrides):
    """The worker's serving loop over `backend` and a fake socket; `engine(sock)` plays the engine's side."""
    config = load_config(overrides=["play.max_turns=2", "inference.batch_wait_s=0.01", *overrides])
    opts = WorkerOptions(run_dir=None, worker_id="w", address="ipc://test")
    sock = FakeSocket()

    async def main():
        with trio.fail_after(60):
            async with open_sandbox_pool(workers=2) as pool, trio.open_nursery() as nursery:  # two plays at once
                nursery.start_soon(engine, sock)
                await _serve(sock, nursery, opts, config, backend, pool, None, "ipc://test")

    trio.run(main)
    return sock


async def _until(predicate) -> None:
    while not predicate():
        await trio.sleep(0.01)


def _tasks_waiting_in(function: str) -> int:
    """How many Trio tasks are parked inside a coroutine named `function` (their await frames say so)."""
    def walk(task):
        yield task
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                yield from walk(child)

    return sum(any(frame.f_code.co_name == function for frame, _ in task.iter_await_frames())
               for task in walk(trio.lowlevel.current_root_task()))


async def _until_waiting(**counts: int) -> None:
    """Until that many tasks wait in each named coroutine (`hold=1`: Batcher.hold, for a version; `generate=1`:
    Batcher.generate, for a batch): a synchronisation point, not a sleep, so the assertion after it means the same
    on a busy machine as on an idle one."""
    with trio.fail_after(30):
        while any(_tasks_waiting_in(name) < n for name, n in counts.items()):
            await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(0.01)


def _engine_sends_the_update_after_the_task(backend):
    async def engine(sock):
        await sock.inbox.send(PolicyUpdate(version=0, path=""))  # the answer to the hello
        await sock.inbox.send(_task("t1", 1))  # its PolicyUpdate is still on its way
        await _until_waiting(hold=1)
        assert backend.generated_on == [], "the task started on v0 before v1 was loaded"
        await sock.inbox.send(PolicyUpdate(version=1, path=V1))
        await _until(lambda: sock.results())
        await sock.inbox.send(Shutdown())

    return engine


def test_a_task_waits_for_a_policy_update_on_its_way_and_plays_on_that_version():
    backend = VersionedBackend()
    sock = _run(backend, _engine_sends_the_update_after_the_task(backend))
    (result,) = sock.results()
    assert backend.loads == [(V1, 1)] and set(backend.generated_on) == {1}
    assert _versions(result) == {1}


def test_a_concurrent_backend_too_loads_the_version_before_the_first_request():
    backend = ConcurrentVersionedBackend()
    sock = _run(backend, _engine_sends_the_update_after_the_task(backend))
    (result,) = sock.results()
    assert backend.loads == [(V1, 1)] and _versions(result) == {1}


def test_tasks_that_come_while_the_version_loads_start_after_the_load():
    """The PolicyUpdate first (as the engine sends it): the idle worker loads it at once, and the tasks, those that
    name it and those that name an older version alike, are generated on it (a concurrent backend used to start
    the requests that came during a load on the old version)."""
    backend = ConcurrentVersionedBackend()
    backend.release_load.clear()

    async def engine(sock):
        await sock.inbox.send(PolicyUpdate(version=0, path=""))
        await sock.inbox.send(PolicyUpdate(version=1, path=V1))
        await sock.inbox.send(_task("t1", 1))
        await sock.inbox.send(_task("t0", 0))
        # t1 waits for its version, t0 (whose version is loaded) for the batch that comes after the load under way
        await _until_waiting(hold=1, generate=1)
        assert backend.generated_on == []
        backend.release_load.set()
        await _until(lambda: len(sock.results()) == 2)
        await sock.inbox.send(Shutdown())

    sock = _run(backend, engine)
    assert backend.loads == [(V1, 1)] and set(backend.generated_on) == {1}
    assert [_versions(r) for r in sock.results()] == [{1}, {1}]


def test_a_version_that_never_comes_is_waited_for_a_bounded_time_then_the_task_runs(capfd):
    backend = VersionedBackend()

    async def engine(sock):
        await sock.inbox.send(PolicyUpdate(version=0, path=""))
        await sock.inbox.send(_task("t5", 5))
        await _until(lambda: sock.results())
        await sock.inbox.send(Shutdown())

    sock = _run(backend, engine, "worker.connect_timeout_s=0.5")
    (result,) = sock.results()
    assert _versions(result) == {0} and backend.loads == []
    assert "needs policy v5, which did not come within worker.connect_timeout_s" in capfd.readouterr().err
