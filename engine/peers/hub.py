"""The hub every message of a run passes through: the worker and learner sockets, the learner handshake, the child
processes and their supervision. The curriculum loop (engine/run.py) gets a Hub and never touches a socket.

    hub = Hub(config, paths, view, on_published=loop.published)   # on_published: each new policy version's message
    await hub.run(loop.curriculum, services=[evaluation.serve])  # serve until the loop returns, then shut down
    results = await hub.run_tasks(label, tasks)                   # design / play tasks, through the dispatcher
    await hub.train(step, samples, checkpoint)                    # a TrainBatch to the learner (target_version += 1)
    await hub.wait_for_version(version, label)                    # until the learner has published it

A worker result is screened (engine/peers/result_checks.py) before the dispatcher takes it; a learner message
from anyone but the learner this engine started (its token) is refused. A peer past its message budget
(engine/peers/flood.py) is shed; a worker that leaves its tasks unread is dropped (engine/peers/dispatch.py).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import trio

from engine.metrics.live import LiveView
from engine.peers.bus import Bus
from engine.peers.dispatch import Dispatcher, WorkerState
from engine.peers.flood import MessageBudget
from engine.peers.policy_transfer import PolicyServer
from engine.peers.processes import Child, learner_child, supervise, worker_child
from engine.peers.result_checks import ResultGate
from engine.peers.time_share import TimeShare
from engine.protocol.config import Config
from engine.protocol.containment import uncontained
from engine.protocol.errors import RunFailed
from engine.protocol.messages import (
    DesignResult,
    DesignTask,
    FetchChunk,
    FetchManifest,
    FetchRunInfo,
    Heartbeat,
    HelloAgain,
    LearnerFailed,
    LearnerHello,
    PlayResult,
    PolicyPublished,
    PolicyUpdate,
    RunInfo,
    Sample,
    Shutdown,
    Slept,
    TaskFailed,
    TrainBatch,
    ValidateResult,
    WorkerBye,
    WorkerHello,
)
from engine.protocol.paths import RunPaths
from engine.protocol.placement import read_plan, worker_env
from engine.protocol.transport import MessageSocket, ProtocolError, short_id

RECEIVE_BATCH = 64  # worker messages taken from the socket at once (their results' values checked together)


def lease_deadline_s(task, config) -> float:
    """How long a worker may hold `task` unanswered: worker.lease_factor x the task's own time bound (a play's
    wall clock, which the worker ends itself at sandbox.play_timeout_s, and a policy load; a design also one
    generation call)."""
    bound = config.sandbox.play_timeout_s + config.inference.sync_timeout_s
    if isinstance(task, DesignTask):
        bound += config.inference.request_timeout_s
    return config.worker.lease_factor * bound


class Hub:
    def __init__(self, config: Config, paths: RunPaths, view: LiveView, *, on_published: Callable[[PolicyPublished], None]):
        self.config = config
        self.paths = paths
        self.view = view
        self.on_published = on_published
        # each known worker's heartbeat figures, by the id it joined as (engine/metrics/phases.py StepClock.heartbeat)
        self.on_heartbeat: Callable[[str, float, float], None] = lambda worker_id, generating_s, sequence_s: None
        self.policy_version = 0  # the learner's newest published version
        self.policy_path = ""
        self.target_version = 0  # the version the learner reaches once every batch sent is trained
        self.isolation = ""  # the workers' sandbox isolation level
        self._policy_changed = trio.Event()
        self._learner_ident: bytes | None = None
        self._learner_ready = trio.Event()
        self._worker_ready = trio.Event()
        self.stopping = False
        self.children: list[Child] = []
        self.worker_sock: MessageSocket | None = None
        self.learner_sock: MessageSocket | None = None
        self.dispatcher: Dispatcher | None = None
        self.bus = Bus(config, paths, view)  # sockets, keys, counters, rate-limited warnings (engine/peers/bus.py)
        self.result_gate = ResultGate.for_run(config, paths, view.line)  # checks every worker result (vocab_size read once)
        self.message_budget = MessageBudget(config.worker.max_messages_per_s, config.worker.message_burst)  # per peer
        self.policy_server: PolicyServer | None = None
        self._progress: dict[str, dict] = {}  # task id -> the progress of its label's run_tasks calls
        self._labels: dict[str, dict] = {}  # label -> its progress while calls under it run
        # The placement `up` planned and wrote to run.json (engine/protocol/placement.py; None: the CPU as before), and
        # the time-shared order of sleeps and wakes around each update (engine/peers/time_share.py).
        self.plan = read_plan(paths.read_meta().placement)
        self.time_share = TimeShare(
            self.plan, send=lambda ident, message: self.worker_sock.try_send_to(ident, message),
            connected=lambda: {ident: state.worker_id for ident, state in self.dispatcher.workers.items()},
            timeout_s=config.inference.request_timeout_s + config.inference.sync_timeout_s, say=view.line)
        self._children_started = trio.Event()

    # ------------------------------------------------------------------ workers
    async def _receive_workers(self) -> None:
        assert self.worker_sock and self.dispatcher
        while True:
            batch = await self.worker_sock.receive_batch_from(RECEIVE_BATCH)
            checked = self._values_checked(batch)
            for ident, message in batch:
                if isinstance(message, ProtocolError):
                    if not self._shed(ident):
                        self.bus.warnings.warn("malformed worker message", f"ignored a malformed message from {short_id(ident)} on the worker socket: {message}")
                elif not self._shed(ident):
                    self._on_worker_message(ident, message, values_checked=id(message) in checked)

    def _values_checked(self, batch: list[tuple[bytes, object]]) -> set[int]:
        """The results of one receive whose sample values pass, checked together (ResultGate.values_pass): the
        first answer of each leased task from an identity not banned; the others are checked one by one, if at all."""
        assert self.dispatcher
        results, seen = [], set()
        for ident, message in batch:
            if isinstance(message, (PlayResult, DesignResult)) and (ident, message.task_id) not in seen and not self.dispatcher.banned(ident) \
                    and self.dispatcher.holds_lease(ident, message.task_id):
                seen.add((ident, message.task_id))
                results.append(message)
        return {id(r) for r in results} if self.result_gate.values_pass(results, self.policy_version) else set()

    def _on_worker_message(self, ident: bytes, message, *, values_checked: bool) -> None:
        match message:
            case WorkerHello() if not self.bus.hello_gate.admit(message):
                self.bus.warnings.warn("refused hello", f"refused a worker hello from {short_id(ident)}: it lacks the run's ipc "
                                       "secret (RUN_DIR/keys/ipc.secret), so it is not one of the run's workers")
            case WorkerHello():
                self.dispatcher.add_worker(
                    WorkerState(
                        ident=ident,
                        worker_id=message.worker_id,
                        slots=message.slots,
                        isolation=message.isolation,
                        backend=message.backend,
                        policy_version=message.policy_version,
                        last_seen=time.monotonic(),
                    )
                )
                self._note_isolation(message.isolation)
                self.view.line(f"worker {short_id(message.worker_id)} joined (backend {short_id(message.backend)}, sandbox {short_id(message.isolation)}, {message.slots} slots)")
                # Always answered: it tells the worker an engine is there, and which policy is current.
                self.worker_sock.try_send_to(ident, PolicyUpdate(version=self.policy_version, path=self.policy_path))
                self.time_share.joined(ident, message.worker_id)  # time-shared: asleep while the learner updates
                self._worker_ready.set()
            case Heartbeat():
                known = self.dispatcher.workers.get(ident)
                if (state := self.dispatcher.heartbeat(ident, message.policy_version, message.tasks_received)) is not None:
                    self.on_heartbeat(state.worker_id, message.generating_s, message.sequence_s)
                elif known is not None:  # dropped just now: it heartbeats but does not read its tasks
                    self.bus.warnings.warn("unread worker", f"worker {known.worker_id} left a task unread over {self.config.worker.unread_heartbeats} "
                                           "of its heartbeats (it does not read its socket); it is dropped and its tasks go to another worker")
                else:  # e.g. attached before a restart
                    self.worker_sock.try_send_to(ident, HelloAgain())  # dropped if it is gone or not reading
            case DesignResult() | PlayResult() | ValidateResult() | TaskFailed():
                self._complete(ident, message, values_checked=values_checked)
            case WorkerBye():
                self.dispatcher.drop_worker(ident)
            case Slept() if ident in self.dispatcher.workers:  # time-shared: its engine freed the GPU
                self.time_share.slept(ident, self.dispatcher.workers[ident].worker_id)
            case FetchRunInfo() | FetchManifest() | FetchChunk():  # a worker without the run's files
                self.policy_server.submit(ident, message)

    def _shed(self, ident: bytes) -> bool:
        """Whether to ignore this message of `ident`: it is banned (results for tasks not leased to it, or an earlier
        flood; engine/peers/leases.py), or it is past its message budget now (engine/peers/flood.py), which bans it."""
        assert self.dispatcher
        if self.dispatcher.banned(ident):
            return True
        if self.message_budget.spend(ident):
            return False
        self.dispatcher.leases.ban(ident, "flooding_peers")
        state = self.dispatcher.drop_worker(ident)
        self.bus.warnings.warn("flooding peer", f"{'worker ' + state.worker_id if state else 'peer ' + short_id(ident)} sent more than "
                               f"{self.config.worker.message_burst} messages at once (worker.message_burst, refilled at "
                               f"worker.max_messages_per_s = {self.config.worker.max_messages_per_s:g}): it is shed, "
                               "its messages ignored for the rest of the run")
        return True

    def _complete(self, ident: bytes, message: DesignResult | PlayResult | ValidateResult | TaskFailed, *, values_checked: bool = False) -> None:
        warn = self.bus.warnings.warn
        if not isinstance(message, TaskFailed) and self.dispatcher.holds_lease(ident, message.task_id):
            # The values, and that it answers its task (engine/peers/result_checks.py); a rejected one is a failed task.
            message, drop = self.result_gate.screen(ident, message, self.dispatcher, self.policy_version, values_checked=values_checked)
            if drop:  # after the dispatcher took the failure, so the task is requeued once
                self.dispatcher.complete(ident, message)
                self.dispatcher.drop_worker(ident)
                return
        verdict = self.dispatcher.complete(ident, message)
        if verdict in ("rejected", "ban"):
            banned = "; it is dropped and banned for the rest of the run" if verdict == "ban" else ""
            warn("rejected result", f"rejected a result for task {short_id(message.task_id)} from {short_id(ident)}: the task is not leased to it{banned}")

    def _run_info(self) -> RunInfo:
        return RunInfo(config=self.paths.config.read_text(), model_path=self.paths.read_model_path(), policy_version=self.policy_version, policy_path=self.policy_path)

    def _note_isolation(self, level: str) -> None:
        if level != self.isolation:
            self.isolation = level
            open_to = uncontained(level)
            self.paths.update_meta(sandbox_isolation=level, sandbox_uncontained=open_to)
            if not level.startswith("bubblewrap") or open_to:
                self.view.line(f"WARNING: the sandbox runs with weak isolation ({short_id(level)}; not contained: "
                               f"{'; '.join(open_to) or 'nothing'}); install bubblewrap for full isolation")

    def _on_result(self, result) -> None:
        p = self._progress.pop(result.task_id, None)
        if p is not None:
            p["done"] += 1
            self.view.status(f"{p['label']} {p['done']}/{p['total']}")

    async def run_tasks(self, label: str, tasks: list) -> list:
        """`tasks` done by the workers, their results in order. Calls under one label that overlap (a refresh's
        slots, engine/refresh.py) share one progress count, `label done/sent`."""
        progress = self._labels.setdefault(label, {"label": label, "done": 0, "total": 0, "calls": 0})
        progress["total"] += len(tasks)
        progress["calls"] += 1
        self._progress.update((task.task_id, progress) for task in tasks)
        self.view.status(f"{label} {progress['done']}/{progress['total']}")
        started = time.monotonic()
        try:
            results = await self.dispatcher.run_tasks(tasks)
        finally:
            for task in tasks:
                self._progress.pop(task.task_id, None)
            progress["calls"] -= 1
            if not progress["calls"]:
                del self._labels[label]
        if not self.view.live:
            failed = sum(1 for r in results if isinstance(r, TaskFailed))
            what = f"{label}: {tasks[0].task_id}" if len(tasks) == 1 else f"{label}: {len(results)}"
            self.view.line(f"{what} done in {time.monotonic() - started:.0f} s" + (f" ({failed} failed)" if failed else ""))
        return results

    # ------------------------------------------------------------------ learner
    async def _receive_learner(self) -> None:
        assert self.learner_sock
        while True:
            try:
                ident, message = await self.learner_sock.receive_from()
            except ProtocolError as exc:
                self.bus.warnings.warn("malformed learner message", f"ignored a malformed message from {short_id(exc.ident)} on the learner socket: {exc}")
                continue
            if not self.bus.learner_gate.admit(ident, message):  # only the learner this engine started (its token)
                self.bus.warnings.warn("rejected learner message", f"rejected a {type(message).__name__} from {short_id(ident)} on the learner socket: not this engine's learner")
                continue
            match message:
                case LearnerHello():
                    self._learner_ident = ident
                    self.policy_version = message.policy_version  # > 0 when it resumed from a checkpoint
                    self.policy_path = message.policy_path
                    self.policy_server.known(message.policy_version, message.policy_path)
                    if message.policy_version > 0:
                        await self.dispatcher.broadcast(PolicyUpdate(version=message.policy_version, path=message.policy_path))
                    self._learner_ready.set()
                case PolicyPublished():
                    self.policy_version = message.version
                    self.policy_path = message.path
                    self.policy_server.known(message.version, message.path)
                    await self.dispatcher.broadcast(PolicyUpdate(version=message.version, path=message.path))
                    if self.policy_version >= self.target_version and self.time_share.asleep:  # every batch sent is trained
                        await self.time_share.wake(self.policy_version)
                        self.paths.update_meta(time_share=self.time_share.counters)
                    self.on_published(message)  # the loop records it (state, metrics row, in-loop evaluation)
                    self._policy_changed.set()
                    self._policy_changed = trio.Event()
                case LearnerFailed():
                    raise RunFailed(f"the learner failed: {message.reason} (see {self.paths.logs / 'learner.log'})")

    async def train(self, step: int, samples: list[Sample], checkpoint: bool, sample_norm: int = 0) -> None:
        """Send a batch to the learner; it trains it with version `target_version` and publishes the next.
        `sample_norm`: TrainBatch's (the final flush's per-sample-mean count; 0 for a step's batch)."""
        batch = TrainBatch(step=step, samples=samples, checkpoint=checkpoint, sample_norm=sample_norm)
        await self.time_share.sleep(self.target_version + 1)  # time-shared: the engines free the GPUs first
        await self.learner_sock.send_to(self._learner_ident, batch)
        self.target_version += 1

    async def wait_for_version(self, version: int, label: str) -> None:
        while self.policy_version < version:
            self.view.status(f"{label}: waiting for policy v{version} (learner at v{self.policy_version})")
            await self._policy_changed.wait()

    # ------------------------------------------------------------------ the run
    async def serve(self, nursery: trio.Nursery, worker_sock: MessageSocket, learner_sock: MessageSocket) -> None:
        """Serve the peers on the open sockets, in `nursery`: the dispatcher, the policy server, both receivers and the
        liveness watch. `run` calls it before it starts the children; bin/benchmarks/bus.py calls it as it is."""
        self.worker_sock, self.learner_sock = worker_sock, learner_sock
        self.dispatcher = Dispatcher(worker_sock, on_result=self._on_result, deadline_s=lambda task: lease_deadline_s(task, self.config),
                                     max_timeouts=self.config.worker.max_timeouts, unread_heartbeats=self.config.worker.unread_heartbeats,
                                     on_sent=self.message_budget.refund)
        self.policy_server = PolicyServer(self.paths, worker_sock, self._run_info, on_served=self.message_budget.refund)
        self.bus.extra["workers"] += [lambda: self.dispatcher.leases.counters, lambda: self.policy_server.counters]
        await nursery.start(self.dispatcher.run)
        nursery.start_soon(self.bus.run)
        nursery.start_soon(self.policy_server.run)
        nursery.start_soon(self._receive_workers)
        nursery.start_soon(self._receive_learner)
        nursery.start_soon(self.dispatcher.watch_liveness, self.config.worker.dead_after_s, self._worker_dead, self._lease_timed_out)

    async def run(self, main: Callable[[], Awaitable[None]], *, services: list[Callable[[Dispatcher], Awaitable[None]]] = ()) -> None:
        """Serve the peers, start the learner and workers, run `main` once both are ready, then tell them to stop."""
        async with self.bus.open() as (worker_sock, learner_sock), trio.open_nursery() as nursery:
            await self.serve(nursery, worker_sock, learner_sock)
            for service in services:
                nursery.start_soon(service, self.dispatcher)
            self._start_children(nursery)
            self.view.status("starting the learner and rollout workers (loading the model)")
            await self._learner_ready.wait()
            await self._worker_ready.wait()
            await self._children_started.wait()
            try:
                await main()
            finally:
                self.stopping = True
                with trio.move_on_after(5) as scope:
                    scope.shield = True
                    await self.dispatcher.broadcast(Shutdown(reason="run finished"))
                    if self._learner_ident is not None:
                        await self.learner_sock.send_to(self._learner_ident, Shutdown(reason="run finished"))
                    await trio.sleep(0.2)
            nursery.cancel_scope.cancel()

    def _worker_dead(self, state: WorkerState) -> None:
        self.view.line(f"warning: worker {state.worker_id} went silent; its tasks were requeued")

    def _lease_timed_out(self, state: WorkerState, task_id: str, dropped: bool) -> None:
        self.view.line(f"warning: worker {state.worker_id} did not answer task {task_id} within its lease deadline; it goes to "
                       "another worker" + (f" and {state.worker_id} is dropped ({state.timeouts} timed out)" if dropped else ""))

    def _start_children(self, nursery) -> None:
        """The learner and `worker.count` workers, each worker on its GPUs from the plan. Time-shared: the workers
        first (each engine sizes its KV cache with the GPUs to itself), asleep before the learner loads, awake for
        the first rollouts (engine/peers/time_share.py)."""
        learner = learner_child(self.paths, self.config.learner.world_size, token=self.bus.token)
        self.children.append(learner)
        start_learner = lambda: nursery.start_soon(lambda: supervise(learner, restartable=False, max_restarts=0, on_exit=self._child_exit, stopping=lambda: self.stopping))  # noqa: E731
        for i in range(self.config.worker.count):
            worker = worker_child(self.paths, f"w{i}", env=worker_env(self.plan, f"w{i}"))
            self.children.append(worker)
            nursery.start_soon(lambda w=worker: supervise(w, restartable=True, max_restarts=3, on_exit=self._child_exit, stopping=lambda: self.stopping))
        if not self.time_share.enabled:
            start_learner()
            self._children_started.set()
            return

        async def in_turn() -> None:
            self.view.status("starting the rollout workers first (time-shared GPUs: each engine sizes its cache alone)")
            await self.time_share.all_joined()
            await self.time_share.sleep(self.policy_version)
            start_learner()
            await self._learner_ready.wait()
            await self.time_share.wake(self.policy_version)
            self._children_started.set()

        nursery.start_soon(in_turn)

    def _child_exit(self, child: Child, code: int) -> None:
        self.view.line(f"warning: {child.name} exited with code {code} (log: {child.log})")
        if child.name.startswith("worker-") and self.dispatcher is not None:
            for ident, state in list(self.dispatcher.workers.items()):
                if f"worker-{state.worker_id}" == child.name:
                    self.dispatcher.drop_worker(ident)

    def stop_children(self) -> None:
        for child in self.children:
            child.stop()
