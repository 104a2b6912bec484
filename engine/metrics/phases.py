"""The step account: where each step's wall time went, by phase, and how busy the generators were.

    clock = StepClock()
    clock.begin()                                         # the loop starts its steps (after a resume's catch-up)
    with clock.span(step, "admission"): ...               # the loop's waits and stages, as they happen
    clock.learner_published(update_s, publish_s)          # each PolicyPublished (the learner's own times)
    clock.heartbeat(worker_id, generating_s, sequence_s)  # each worker heartbeat (actors/inference/batcher.py)
    row |= clock.close(step, refresh_parts, plays_reload) # just before step's batch is sent: the account's fields

Step s's wall time (`time_step_s`) runs from the moment step s - 1's batch went out (for the first step of a
process, `begin`) to the moment s's goes out. The loop records spans of s as it goes; each is cut to that interval
(with `run.max_staleness` above 0 a step's plays may start before it) and reported as `time_<phase>_s`:
- `admission`: waiting for the learner to publish the version step s plays on; of that wait, the parts that
  overlap the learner's own update and publish (the learner's `learner_update_s` and `learner_publish_s`, ending
  when its PolicyPublished arrived) are `learner_update` and `publish`;
- the refresh (steps s % k == 0): `design` (generating designs), `validation` (the sandboxed checks of a design),
  `hint` (writing hints), each a design attempt's wall time split by what its task reports of itself
  (actors/designer.py), `revalidation` (engine/revalidate.py), and the waits of its tasks for a new policy version;
  the slots design at once, so their times are summed and scaled to the refresh's wall time (`close`);
- `plays`: the step's episodes; of them `worker_reload`: the longest wait of a play for its policy version to load;
- `engine`: everything else on the loop: the refresh's store writes, the batch, rewards, the metrics row.
The phases sum to the step's wall time up to the moments between spans (tests/engine/metrics/test_phases.py and
the e2e run check within 5 %).

`generator_busy_share`: the share of the step's wall time the workers' generators had at least one generation
running (summed over workers, over workers x wall time); `generator_concurrency`: the mean number of generations
running while busy. From the heartbeats (every `worker.heartbeat_s`), so a figure lags by up to one heartbeat at
either end of the step. A worker's figures are checked (finite, >= 0; figures that go back start its count
again) and never steer anything.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager

PHASES = ("design", "validation", "hint", "revalidation", "plays", "worker_reload", "admission", "learner_update", "publish", "engine")
REFRESH_PARTS = ("design", "validation", "hint", "revalidation", "worker_reload")


def design_round_split(wall: float, results) -> dict[str, float]:
    """A design attempt's (or round's) wall time by part, from its results' own `seconds`, `validate_s`, `hint_s` and
    `policy_wait_s` (failed tasks report none): the longest policy wait is the reload, the rest is split in
    proportion to the generation, validation and hint time the tasks report."""
    timed = [r for r in results if hasattr(r, "validate_s")]
    reload = min(wall, max((r.policy_wait_s for r in timed), default=0.0))
    rest = wall - reload
    total = sum(r.seconds for r in timed)
    if total <= 0:
        return {"design": rest, "validation": 0.0, "hint": 0.0, "worker_reload": reload}
    validation = rest * sum(r.validate_s for r in timed) / total
    hint = rest * sum(r.hint_s for r in timed) / total
    return {"design": max(0.0, rest - validation - hint), "validation": validation, "hint": hint, "worker_reload": reload}


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


class StepClock:
    def __init__(self, now=time.monotonic):
        self._now = now
        self._start = now()  # the current step interval's start
        self._spans: dict[int, list[tuple[str, float, float]]] = {}
        self._learner: list[tuple[float, float, float]] = []  # (update start, publish start, published), newest last
        self._generators: dict[str, tuple[float, float]] = {}  # worker id -> (generating_s, sequence_s), latest
        self._mark: dict[str, tuple[float, float]] = {}  # the same at the interval's start
        self._seen: dict[str, float] = {}  # worker id -> its last heartbeat

    def begin(self) -> None:
        self._start = self._now()
        self._mark = dict(self._generators)

    @contextmanager
    def span(self, step: int, phase: str):
        started = self._now()
        try:
            yield
        finally:
            self._spans.setdefault(step, []).append((phase, started, self._now()))

    def learner_published(self, update_s: float, publish_s: float) -> None:
        now = self._now()
        update_s = update_s if math.isfinite(update_s) and update_s > 0 else 0.0
        publish_s = publish_s if math.isfinite(publish_s) and publish_s > 0 else 0.0
        self._learner = [*self._learner[-31:], (now - publish_s - update_s, now - publish_s, now)]

    def heartbeat(self, worker_id: str, generating_s: float, sequence_s: float) -> None:
        """A worker's cumulative figures. Values that are not finite or negative are ignored; a worker's first
        figures are its starting mark, and figures that go back (a restarted worker of the same id) start again."""
        if not all(math.isfinite(v) and v >= 0 for v in (generating_s, sequence_s)):
            return
        last = self._generators.get(worker_id)
        if last is None:
            self._mark[worker_id] = (generating_s, sequence_s)
        elif generating_s < last[0] or sequence_s < last[1]:
            self._mark[worker_id] = (0.0, 0.0)
        self._generators[worker_id] = (generating_s, sequence_s)
        self._seen[worker_id] = self._now()

    def close(self, step: int, refresh_parts: dict[str, float] | None = None, plays_reload: float = 0.0) -> dict[str, float]:
        """Step's account, its interval ending now; the next step's interval starts here. `refresh_parts`: the
        refresh's split (`design_round_split` summed, and revalidation); `plays_reload`: the plays' longest wait for
        their policy version (engine/plays.py StepPlays.reload_s)."""
        end = self._now()
        start, self._start = self._start, end
        times = dict.fromkeys(PHASES, 0.0)
        refresh = 0.0
        for phase, a, b in self._spans.pop(step, []):
            if b <= start or a >= end:
                continue
            a, b = max(a, start), min(b, end)
            if phase == "admission":
                for update_start, publish_start, published in self._learner:
                    times["learner_update"] += _overlap(a, b, update_start, publish_start)
                    times["publish"] += _overlap(a, b, publish_start, published)
                times["admission"] += b - a
            elif phase == "refresh":
                refresh += b - a
            else:
                times[phase] += b - a
        for step_left in [s for s in self._spans if s < step]:  # spans of steps that never closed (a cut run)
            del self._spans[step_left]
        times["admission"] = max(0.0, times["admission"] - times["learner_update"] - times["publish"])
        reload_in_plays = min(plays_reload, times["plays"])
        times["plays"] -= reload_in_plays
        times["worker_reload"] += reload_in_plays
        refresh_parts = {name: max(0.0, (refresh_parts or {}).get(name, 0.0)) for name in REFRESH_PARTS}
        scale = min(1.0, refresh / sum(refresh_parts.values())) if sum(refresh_parts.values()) > 0 else 0.0
        for name, value in refresh_parts.items():
            times[name] += value * scale
        times["engine"] += max(0.0, refresh - sum(refresh_parts.values()) * scale)
        account = {f"time_{phase}_s": round(seconds, 4) for phase, seconds in times.items()}
        account["time_step_s"] = round(end - start, 4)
        account |= self._generator_figures(start, end)
        self._mark = dict(self._generators)
        return account

    def _generator_figures(self, start: float, end: float) -> dict[str, float]:
        busy = sequences = 0.0
        workers = 0
        for worker, (generating, sequence) in self._generators.items():
            if self._seen[worker] <= start:  # gone (or silent) through the whole step
                continue
            before = self._mark.get(worker, (generating, sequence))
            busy += generating - before[0]
            sequences += sequence - before[1]
            workers += 1
        wall = end - start
        share = busy / (workers * wall) if workers and wall > 0 else 0.0
        return {"generator_busy_share": round(min(1.0, share), 4), "generator_concurrency": round(sequences / busy, 3) if busy > 0 else 0.0}


def biggest_phases(row: dict, n: int = 2) -> list[tuple[str, float]]:
    """The `n` phases that took the most of a metrics row's step (the live view's step line)."""
    times = [(phase, row.get(f"time_{phase}_s", 0.0)) for phase in PHASES]
    return sorted((t for t in times if t[1] > 0), key=lambda t: -t[1])[:n]
