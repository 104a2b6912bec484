"""The engine checks what a worker hands it: a worker is a peer, not a part of the engine.

    gate = ResultGate.for_run(config, paths, view.line)     # reads the model's vocab_size once (engine/tools/models.py)
    checked = gate.values_pass(results_received_together, newest_version)   # their values at once
    message, drop = gate.screen(ident, message, dispatcher, newest_version, values_checked=checked)
    dispatcher.complete(ident, message)                     # a rejected result arrives as a TaskFailed
    if drop: dispatcher.drop_worker(ident)

A result (`DesignResult`, `PlayResult`, `ValidateResult`) passes when `result_problem` finds nothing:
- its sample's values (`engine.protocol.sample_values.sample_problem`): arrays of one length, token ids within the model's
  vocabulary, loss mask 0/1, finite log-probs <= 0 on sampled tokens, versions in [-1, the engine's newest policy
  version], finite reward, advantage and temperature;
- every loss-mask token (a token it would train on) carries a real policy version (>= 0): -1 marks a prompt or
  observation token, and a trained token without a version could never be judged stale (engine/batches.py
  `drop_stale` drops such a sample too, should one get past);
- a play's episode return finite and in [-1, 1] (also its sample's reward), every turn reward finite, turn versions
  in range; counts and seconds finite and >= 0 (the timing figures too, a design's validation and hint time within
  its seconds);
- it names the worker id its sender joined as, and answers the task it was leased for: the same kind, and the
  sample's id, role, arm, env_id, skill and step (and the play's env_id, arm and seed) are the task's. Only leased
  results are screened (engine/peers/hub.py); any other is the dispatcher's lease check's (engine/peers/leases.py).
A rejected result becomes a failed task (retried elsewhere as any failure is), is counted in `counters` (and
run.json's `result_checks`), and is logged at most `LOG_LINES` lines per minute per worker (ids cut short); the
worker is dropped from the rotation once it has sent `worker.max_rejected` of them (again at each later one,
should it rejoin).

A worker holding a policy version newer than the engine's (attached by hand across a resume that went back to an
older checkpoint) has its samples refused until the learner publishes that version again.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable

from engine.protocol.config import Config
from engine.protocol.config import MAX_DRAWS
from engine.protocol.messages import (
    DesignResult,
    DesignTask,
    PlayResult,
    PlayTask,
    Sample,
    TaskFailed,
    ValidateResult,
    ValidateTask,
    unpack_ints,
    unpack_mask,
)
from engine.protocol.model_config import read_vocab_size
from engine.protocol.paths import RunPaths
from engine.protocol.sample_values import sample_problem, values_pass
from engine.peers.ratelimit import Warnings
from engine.protocol.transport import short_id

LOG_LINES = 3  # rejection lines per worker per minute
REASON_CHARS = 300  # of the TaskFailed reason (it may end up in a stored environment's `reason`)

Result = DesignResult | PlayResult | ValidateResult


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _mismatch(sample: Sample, **expected) -> str | None:
    for name, value in expected.items():
        if getattr(sample, name) != value:
            return f"its sample's {name} {short_id(str(getattr(sample, name)), 40)!r} is not the task's {short_id(str(value), 40)!r}"
    return None


def _unversioned_problem(sample: Sample) -> str | None:
    """A loss-mask token stamped without a policy version (< 0), which no honest backend sends. Asked after
    `sample_problem` passed (the loss mask is 0 or 1)."""
    versions, mask = unpack_ints(sample.versions), unpack_mask(sample.loss_mask)
    if not len(versions) or int((versions * mask).min()) >= 0:  # masked out, a version reads 0
        return None
    trained = versions[mask == 1]
    return (f"{int((trained < 0).sum())} of its {trained.size} loss-mask tokens carry policy version {int(trained.min())}: a trained "
            "token needs the version (>= 0) that sampled it; -1 is for prompt tokens (loss mask 0)")


def _timing_problem(result: DesignResult | PlayResult) -> str | None:
    """The step account's figures (engine/metrics/phases.py): finite, >= 0, and a design's parts within its seconds."""
    parts = ("policy_wait_s", "validate_s", "hint_s") if isinstance(result, DesignResult) else ("policy_wait_s",)
    for name in parts:
        value = getattr(result, name)
        if not (_finite(value) and value >= 0):
            return f"its {name} {value} is not a finite number >= 0"
    if isinstance(result, DesignResult) and result.validate_s + result.hint_s > result.seconds * 1.001 + 1e-3:
        return f"its validate_s + hint_s ({result.validate_s + result.hint_s:.3f}) exceed its seconds ({result.seconds:.3f})"
    return None


def _play_problem(result: PlayResult, task: PlayTask, newest_version: int) -> str | None:
    for name in ("env_id", "arm", "seed"):
        if getattr(result, name) != getattr(task, name):
            return f"its {name} {short_id(str(getattr(result, name)), 40)!r} is not the task's {short_id(str(getattr(task, name)), 40)!r}"
    if problem := _mismatch(result.agent, sample_id=task.task_id, role="agent", arm=task.arm, env_id=task.env_id, skill=task.skill, step=task.step):
        return problem
    for name, value in (("episode return", result.episode_return), ("sample reward", result.agent.reward)):
        if not _finite(value) or not -1.0 <= value <= 1.0:
            return f"its {name} {value} is not a finite number in [-1, 1]"
    for turn in result.turns:
        if not _finite(turn.reward):
            return f"a turn reward is {turn.reward}, not a finite number"
        if not -1 <= turn.policy_version <= newest_version:
            return f"a turn's policy version {turn.policy_version} is outside [-1, {newest_version}]"
        if turn.observation_chars < 0:
            return "a turn's observation length is negative"
    return None


def _design_problem(result: DesignResult, task: DesignTask) -> str | None:
    if not 1 <= result.draws <= MAX_DRAWS:
        return f"its draws {result.draws} is not in [1, {MAX_DRAWS}]"
    for name in ("skill", "passage_id", "attempt"):
        if getattr(result, name) != getattr(task, name):
            return f"its {name} {short_id(str(getattr(result, name)), 40)!r} is not the task's {short_id(str(getattr(task, name)), 40)!r}"
    return _mismatch(result.designer, sample_id=task.task_id, role="designer", arm="design", env_id=task.task_id, skill=task.skill, step=task.step)


def result_problem(result: Result, task, *, vocab_size: int | None, newest_version: int, values_checked: bool = False) -> str | None:
    """Why the engine refuses `result` as the answer to `task` (the task leased to its sender), or None.
    `task` None: not leased to the sender, which the dispatcher's lease check answers; only the values are checked.
    `values_checked`: its sample's values passed already (`values_pass`, with the others of its receive)."""
    if isinstance(result, ValidateResult):
        if task is not None and not isinstance(task, ValidateTask):
            return "a validation result for a task that is not a validation"
        if task is not None and result.env_id != task.env_id:
            return f"it validates {short_id(result.env_id, 40)!r}, not the task's {short_id(task.env_id, 40)!r}"
        return None if _finite(result.seconds) and result.seconds >= 0 else "its seconds are not a finite number >= 0"
    if not (_finite(result.seconds) and result.seconds >= 0 and result.tokens_generated >= 0):
        return "its seconds or tokens_generated are not finite numbers >= 0"
    if problem := _timing_problem(result):
        return problem
    sample = result.agent if isinstance(result, PlayResult) else result.designer
    if not values_checked and (problem := sample_problem(sample, vocab_size=vocab_size, max_version=newest_version) or _unversioned_problem(sample)):
        return problem
    if isinstance(result, PlayResult) and task is None:
        ok = _finite(result.episode_return) and -1.0 <= result.episode_return <= 1.0
        return None if ok else f"its episode return {result.episode_return} is not a finite number in [-1, 1]"
    if isinstance(result, PlayResult):
        return _play_problem(result, task, newest_version) if isinstance(task, PlayTask) else "a play result for a task that is not a play"
    if task is not None:
        return _design_problem(result, task) if isinstance(task, DesignTask) else "a design result for a task that is not a design"
    return None


def leased_task(dispatcher, ident: bytes, task_id: str):
    """The task `task_id` as leased to `ident` (the dispatcher's in-flight record), or None."""
    state = dispatcher.workers.get(ident)
    return state.in_flight.get(task_id) if state is not None else None


class ResultGate:
    def __init__(self, *, vocab_size: int | None, max_rejected: int, emit: Callable[[str], None], record: Callable[[dict], None] | None = None):
        self.vocab_size = vocab_size
        self._record = record  # called with the counters after each refusal (the run's run.json)
        self.max_rejected = max_rejected
        self._warnings = Warnings(emit, per_interval=LOG_LINES, interval_s=60.0)
        self.rejected: collections.Counter[bytes] = collections.Counter()  # by worker identity
        self.counters: collections.Counter[str] = collections.Counter()  # refused_results, dropped_workers (also in run.json)

    @classmethod
    def for_run(cls, config: Config, paths: RunPaths, emit: Callable[[str], None]) -> "ResultGate":
        model_path = paths.read_meta().model_path or config.model.path
        vocab_size = read_vocab_size(model_path) if model_path else None
        if vocab_size is None:
            emit(f"warning: no vocab_size in {model_path or 'the model'}'s config.json: token ids from workers are not bounded")
        record = lambda counters: paths.update_meta(result_checks=counters)  # noqa: E731
        return cls(vocab_size=vocab_size, max_rejected=config.worker.max_rejected, emit=emit, record=record)

    def values_pass(self, results: list[DesignResult | PlayResult], newest_version: int) -> bool:
        """Whether the samples of all `results` pass the value checks (`values_pass`): asked of a receive's results
        together, so `screen` can skip them one by one; False: `screen` checks each itself and says what fails."""
        samples = [r.agent if isinstance(r, PlayResult) else r.designer for r in results]
        return bool(samples) and values_pass(samples, vocab_size=self.vocab_size, max_version=newest_version, versioned=True)

    def screen(self, ident: bytes, result: Result, dispatcher, newest_version: int, *, values_checked: bool = False) -> tuple[Result | TaskFailed, bool]:
        """`result` itself, or a TaskFailed naming why it is refused; and whether to drop its sender now (after
        the dispatcher has taken the failure: dropping first would requeue the task twice). `values_checked`: its
        sample passed `values_pass` under `newest_version` already."""
        task = leased_task(dispatcher, ident, result.task_id)
        problem = result_problem(result, task, vocab_size=self.vocab_size, newest_version=newest_version, values_checked=values_checked)
        joined_as = getattr(dispatcher.workers.get(ident), "worker_id", result.worker_id)
        if problem is None and result.worker_id != joined_as:  # the id re-validation tells authors by
            problem = f"it names worker {short_id(result.worker_id, 32)!r}, not {short_id(joined_as, 32)!r} that it joined as"
        if problem is None:
            return result, False
        self.counters["refused_results"] += 1
        self.rejected[ident] += 1
        count = self.rejected[ident]
        drop = self.max_rejected > 0 and count >= self.max_rejected and task is not None
        worker = short_id(result.worker_id, 32)
        self._warnings.warn(
            f"rejected results from {short_id(ident, 32)}",
            f"rejected the result of worker {worker} for task {short_id(result.task_id, 48)}: {problem} "
            f"({count} from this worker)",
        )
        if drop:
            self.counters["dropped_workers"] += 1
            self._warnings.warn("dropped workers", f"dropped worker {worker}: {count} of its results failed the engine's checks")
        if self._record is not None:
            self._record(dict(self.counters))
        reason = f"rejected result: {problem}"[:REASON_CHARS]
        return TaskFailed(task_id=result.task_id, worker_id=result.worker_id, reason=reason), drop
