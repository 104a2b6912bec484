"""The fixed-environment RLVE baseline (`--preset rlve`): Reasoning-Gym tasks as training environments, each with
RLVE's sliding-window difficulty controller, trained by the same learner as self-play.

    controller = SlidingWindow(tasks, accuracy=0.9, window=128, step=4)   # spade-reference.md sections 9 and 12
    controller.record("chain_sum", difficulty=0, won=True)                  # one play's outcome
    difficulty = controller.sample("chain_sum", rng)                        # uniform over [low, high]
    result = rlve_refresh(store, config, step)                              # engine/refresh.py's hook

The controller (RLVE, Zeng et al. 2025): each task has a difficulty window [low, high], starting at [0, 0]. Only
plays at the top difficulty `high` count: once `window` of them are in, if their accuracy reached `accuracy`,
`high` rises by one and `low` follows to keep at most `step` difficulties in the window (low = max(low, high -
step + 1)); either way the count starts again. Problems are drawn uniformly from [low, high].

How a task becomes an environment: the workers play Reasoning-Gym problems in-process as trusted environments
(actors/reasoning_gym/play.py) rather than as generated stdlib-only code in the sandbox, because the datasets'
own scorers (`score_answer`) are what RLVE's verifiers are, and they need the library (sympy and more), which the
sandbox cannot import; the model's answers, which some scorers `eval`, are scored in a separate locked-down
process. Each refresh (every step under the preset) draws `curriculum.envs_per_step` tasks without replacement
across refreshes, and for each one difficulty from its window and one problem: every play of that environment at
the step is the same problem (a GRPO group over one problem, as in RLVE). The environment is stored like a seed
(source "seed", code = the problem's `ReasoningGymTask`, engine/protocol/messages.py), so its plays, advantages, batches,
resume and report are the self-play engine's own.

Resume: the controller's state and the first step whose plays it has not counted yet are in the run state
(`RunState.rlve`, `RunState.rlve_counted`), written with the refresh's environments in one transaction; the next
refresh counts the plays of every step since, from the stored trajectories, so a resumed run continues the
controller exactly.
"""

from __future__ import annotations

import json
import random

import msgspec

from engine.protocol.config import Config, RlveConfig
from engine.curriculum import ActiveEnv, RefreshResult, pool_draw, seed_record
from engine.protocol.messages import ReasoningGymTask, decode_reasoning_gym_task, encode_reasoning_gym_task
from engine.protocol.paths import RG_HARD_FILE
from storage.store import Store

ENV_PREFIX = "rlve-"


class TaskWindow(msgspec.Struct, array_like=True):
    low: int = 0
    high: int = 0
    attempts: int = 0  # plays at `high` since the window last moved or was decided
    wins: int = 0


class SlidingWindow:
    """RLVE's adaptive difficulty, one window per task (a pure object: no I/O, state as plain data)."""

    def __init__(self, tasks: list[str], *, accuracy: float, window: int, step: int, state: dict | None = None):
        self.accuracy, self.window, self.step = accuracy, window, step
        saved = state or {}
        self.tasks = {t: msgspec.convert(saved[t], TaskWindow) if t in saved else TaskWindow() for t in tasks}

    @classmethod
    def of(cls, config: RlveConfig, state: dict | None = None) -> SlidingWindow:
        return cls(config.tasks, accuracy=config.accuracy, window=config.window, step=config.difficulty_step, state=state)

    def record(self, task: str, difficulty: int, won: bool) -> bool:
        """Count one play; True when it moved the task's window up."""
        w = self.tasks.get(task)
        if w is None or difficulty != w.high:
            return False
        w.attempts += 1
        w.wins += bool(won)
        if w.attempts < self.window:
            return False
        rise = w.wins >= self.accuracy * w.attempts
        if rise:
            w.high += 1
            w.low = max(w.low, w.high - self.step + 1)
        w.attempts = w.wins = 0
        return rise

    def sample(self, task: str, rng: random.Random) -> int:
        w = self.tasks[task]
        return rng.randint(w.low, w.high)

    def state(self) -> dict[str, list[int]]:
        return {t: list(msgspec.to_builtins(w)) for t, w in self.tasks.items()}


def task_families() -> dict[str, str]:
    """Reasoning-Gym dataset -> the SPADE family (math, algorithmic, cognition, logic) of the rg-hard list."""
    try:
        return {name: spec["category"] for name, spec in json.loads(RG_HARD_FILE.read_text())["datasets"].items()}
    except (OSError, ValueError, KeyError):
        return {}


def count_plays(store: Store, controller: SlidingWindow, first: int, stop: int) -> int:
    """Feed the controller the unhinted RLVE plays of steps first..stop-1; returns how many it counted."""
    specs: dict[str, ReasoningGymTask | None] = {}
    counted = 0
    for step in range(first, stop):
        for t in store.trajectories(step):
            if t.role != "agent" or t.arm != "no_hint" or not t.env_id.startswith(ENV_PREFIX) or t.status == "failed":
                continue
            if t.env_id not in specs:
                record = store.environment(t.env_id)
                specs[t.env_id] = decode_reasoning_gym_task(record.code) if record is not None else None
            spec = specs[t.env_id]
            if spec is not None:
                controller.record(spec.dataset, spec.difficulty, t.episode_return > 0)
                counted += 1
    return counted


def rlve_refresh(store: Store, config: Config, step: int) -> RefreshResult:
    """This refresh's Reasoning-Gym environments, at the controller's difficulties (engine/refresh.py's hook)."""
    r, c = config.rlve, config.curriculum
    state = store.state()
    controller = SlidingWindow.of(r, state.rlve)
    count_plays(store, controller, state.rlve_counted, step)
    families = task_families()
    rng = random.Random(f"rlve:{config.run.seed}:{step}")
    records = []
    for index in pool_draw(len(r.tasks), c.envs_per_step, step // c.refresh_interval, config.run.seed):
        name = r.tasks[index]
        problem = ReasoningGymTask(dataset=name, difficulty=controller.sample(name, rng), seed=rng.randrange(1 << 31),
                                   size=1, index=0, max_turns=min(2, config.play.max_turns))
        records.append(seed_record(f"{ENV_PREFIX}s{step:04d}-{name}", families.get(name, "reasoning-gym"),
                                   encode_reasoning_gym_task(problem), "", step=step))
    with store.batch() as batch:
        for record in records:
            batch.put_environment(record)
        state = store.state()
        state.rlve, state.rlve_counted = controller.state(), step
        batch.put_state(state)
    return RefreshResult(active=[ActiveEnv.of(e, designed_now=False) for e in records], requested=0, valid=0, tokens=0)
