"""The hub's worker receive (engine/peers/hub.py): the results one receive brings in are value-checked together, and
a bad one among them is still refused by name while the others are taken."""

import msgspec
import trio
import zmq

from engine.peers.hub import Hub
from engine.protocol.config_loading import dump_config, load_config
from engine.protocol.keys import ensure_ipc_secret
from engine.protocol.messages import EngineToWorker, PlayResult, PlayTask, TaskFailed, TurnRecord, WorkerHello
from engine.protocol.paths import RunPaths
from tests.engine.builders import checked_sample
from tests.engine.peers.peers_helpers import RecordingView

TASKS = [PlayTask(task_id=f"s0000-e-no_hint-{i:02d}", env_id="e", skill="k", code="", hint="", arm="no_hint", seed=i, step=0) for i in range(6)]
TURN = TurnRecord(action="1", parse_rule="boxed", reward=1.0, terminated=True, truncated=False, policy_version=0, observation_chars=4)


def _answer(task: PlayTask, bad: bool) -> PlayResult:
    sample = checked_sample(sample_id=task.task_id, versions=(-1, 0, 0, 0), mask=(0, 1, 2 if bad else 1, 1))
    return PlayResult(task_id=task.task_id, worker_id="w1", env_id="e", arm="no_hint", seed=task.seed, status="completed", failure="",
                      episode_return=1.0, agent=sample, turns=[TURN], tokens_generated=3, seconds=0.1)


def test_a_bad_result_among_a_receives_good_ones_is_refused_and_the_good_ones_taken(tmp_path):
    paths = RunPaths(tmp_path / "run")
    paths.root.mkdir(parents=True)
    config = load_config()
    paths.config.write_text(dump_config(config))
    view = RecordingView()
    hub = Hub(config, paths, view, on_published=lambda message: None)
    answered: list[str] = []

    def worker(address: str, secret: str) -> None:
        """A plain DEALER worker with six slots: it takes all six tasks, then answers them in one burst, the third
        one with a loss mask of 2 the first time; a retried task gets a good answer."""
        encoder, decoder = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(EngineToWorker)
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, b"w1")
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, 20_000)
        sock.connect(address)
        sock.send(encoder.encode(WorkerHello(worker_id="w1", pid=1, slots=6, isolation="none", backend="test", policy_version=0, secret=secret)))
        tasks = []
        while len(answered) < 7:
            message = decoder.decode(sock.recv())
            if isinstance(message, PlayTask):
                tasks.append(message)
            if len(tasks) == 6 or (len(answered) >= 6 and tasks):
                for task in tasks:
                    sock.send(encoder.encode(_answer(task, bad=task.task_id == TASKS[2].task_id and not answered)), copy=True)
                answered.extend(t.task_id for t in tasks)
                tasks = []
        sock.close()

    async def main():
        with trio.fail_after(30):
            async with hub.bus.open() as (worker_sock, learner_sock), trio.open_nursery() as nursery:
                await hub.serve(nursery, worker_sock, learner_sock)
                nursery.start_soon(trio.to_thread.run_sync, worker, hub.bus.worker_address, ensure_ipc_secret(paths.keys))
                while not hub.dispatcher.workers:
                    await trio.sleep(0.01)
                results = await hub.run_tasks("plays", TASKS)
                nursery.cancel_scope.cancel()
        return results

    results = trio.run(main)
    assert all(isinstance(r, PlayResult) for r in results) and [r.task_id for r in results] == [t.task_id for t in TASKS]
    assert answered.count(TASKS[2].task_id) == 2  # refused once, then retried and taken
    assert hub.result_gate.counters["refused_results"] == 1
    assert any("loss mask holds 2" in line and TASKS[2].task_id in line for line in view.lines), view.lines
