"""In-loop evaluation during `up` (`[eval]`, engine/protocol/config.py): every `eval.every` policy versions, and
once more for the final one, the workers play a probe set with the newest policy.

    evaluation = InLoopEval(config, paths, seeds)
    nursery.start_soon(evaluation.serve, dispatcher)      # runs the evaluations one after another, in the background
    evaluation.published(version)                         # on PolicyPublished: queue it when it is due
    await evaluation.finish(final_version)                # at the end of the run: the final version, then wait

The engine cannot run inference, so an evaluation is a list of ordinary PlayTasks sent through the dispatcher like
the training plays: the environments of `eval.path` (suite "envs"; win = return > 0) or Reasoning-Gym rg-hard
problems (suite "rg-hard"; the task carries the problem, engine/protocol/messages.py `ReasoningGymTask`; win = score >= 1).
Their task ids start with "eval-" and their results are never stored as trajectories, never given an advantage
and never put in a batch: they only become one row of metrics.jsonl, {"eval": {...}, "eval_policy_version": v},
which has no "step" key, so no reader of the training rows takes it for one, and the report's Evaluation table.
"""

from __future__ import annotations

import json
import time
import zlib
from collections import defaultdict
from pathlib import Path

import trio

from engine.protocol.config import Config
from engine.curriculum import SeedEnvironment, load_environment_folder
from engine.protocol.messages import (
    PlayResult,
    PlayTask,
    ReasoningGymTask,
    encode_reasoning_gym_task,
    unpack_ints,
)
from engine.protocol.metrics_file import append_row, read_rows
from engine.protocol.paths import RG_HARD_FILE, RunPaths
from engine.protocol.stats import wilson


def eval_tasks(config: Config, version: int, seeds: list[SeedEnvironment]) -> tuple[list[PlayTask], dict[str, str]]:
    """The probe set's play tasks for `version`, and each environment's group (its skill, or the rg family). The same
    problems (seeds, entries) at every version, so successive rows compare like with like."""
    e = config.eval
    tasks, groups = [], {}
    if e.suite == "rg-hard":
        configs = json.loads(RG_HARD_FILE.read_text())["datasets"]
        for name in e.datasets or list(configs):
            if name not in configs:
                raise ValueError(f"eval.datasets: {name!r} is not an rg-hard dataset")
            groups[f"eval-{name}"] = configs[name]["category"]
            for i in range(e.episodes):
                problem = ReasoningGymTask(dataset=name, params=configs[name]["params"], seed=42, size=max(8, e.episodes),
                                           index=i, max_turns=2, max_tokens=e.max_tokens, temperature=e.temperature)
                tasks.append(_task(version, name, configs[name]["category"], encode_reasoning_gym_task(problem), i))
        return tasks, groups
    envs = load_environment_folder(Path(e.path)) if e.path else seeds
    for env in envs:
        groups[f"eval-{env.name}"] = env.skill or "envs"
        for i in range(e.episodes):
            tasks.append(_task(version, env.name, env.skill or "envs", env.code, i))
    return tasks, groups


def _task(version: int, name: str, skill: str, code: str, i: int) -> PlayTask:
    return PlayTask(task_id=f"eval-v{version:06d}-{name}-{i:02d}", env_id=f"eval-{name}", skill=skill, code=code, hint="",
                    arm="no_hint", seed=zlib.crc32(f"eval:{name}:{i}".encode()) & 0x7FFFFFFF, step=-1)


def eval_row(config: Config, version: int, results: list, groups: dict[str, str], seconds: float) -> dict:
    plays = [r for r in results if isinstance(r, PlayResult)]
    won = [r.status != "failed" and r.episode_return > 0 for r in plays]
    by_group: dict[str, list[bool]] = defaultdict(list)
    for r, w in zip(plays, won):
        by_group[groups.get(r.env_id, "?")].append(w)
    versions = [int(v) for r in plays for v in unpack_ints(r.agent.versions) if v >= 0]
    n, wins = len(results), sum(won)  # a task that failed outright counts as an episode not won
    low, high = wilson(wins, n)
    return {
        "eval": {
            "suite": config.eval.suite, "policy_version": version, "episodes": n, "wins": wins,
            "win_rate": wins / n if n else 0.0, "low": low, "high": high,
            "failed": sum(1 for r in plays if r.status == "failed") + (len(results) - len(plays)),
            "groups": {g: sum(v) / len(v) for g, v in sorted(by_group.items())},
            "sampled_versions": [min(versions), max(versions)] if versions else [],
            "seconds": seconds,
        },
        "eval_policy_version": version,
        "time": time.time(),
    }


def evaluated_versions(path: Path) -> set[int]:
    return {row["eval_policy_version"] for row in read_rows(path) if "eval_policy_version" in row}


class InLoopEval:
    def __init__(self, config: Config, paths: RunPaths, seeds: list[SeedEnvironment], *, say=None):
        self.config, self.paths, self.seeds = config, paths, seeds
        self.queued: set[int] = evaluated_versions(paths.metrics)
        self._send, self._receive = trio.open_memory_channel[int](1000)
        self._pending = 0
        self._idle = trio.Event()
        self._idle.set()
        self.say = say  # a line for the live view

    @property
    def enabled(self) -> bool:
        return self.config.eval.every > 0

    def published(self, version: int, *, final: bool = False) -> None:
        every = self.config.eval.every
        if not every or version in self.queued or version <= 0 or not (final or version % every == 0):
            return
        self.queued.add(version)
        self._pending += 1
        self._idle = trio.Event()
        self._send.send_nowait(version)

    async def finish(self, version: int) -> None:
        self.published(version, final=True)
        await self._idle.wait()

    async def serve(self, dispatcher) -> None:
        async for version in self._receive:
            started = time.monotonic()
            tasks, groups = eval_tasks(self.config, version, self.seeds)
            results = await dispatcher.run_tasks(tasks)
            row = eval_row(self.config, version, results, groups, time.monotonic() - started)
            append_row(self.paths.metrics, row)
            if self.say is not None:
                e = row["eval"]
                self.say(f"eval v{version} ({e['suite']}): win rate {e['win_rate']:.2f} [{e['low']:.2f}, {e['high']:.2f}] "
                         f"over {e['episodes']} episodes")
            self._pending -= 1
            if not self._pending:
                self._idle.set()
