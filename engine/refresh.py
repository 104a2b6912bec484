"""The refresh: new environments for the next k steps, designed by the workers and stored with their verdicts.

    designs = Designs(config, store, sampler, rng)
    designs.seed_memory(seeds)                           # once: the seed environments, valid, in store and memory
    result = await designs.refresh(step, run_tasks, version)   # RefreshResult: the active environments and counts

Every slot gets a design task grounded on a fresh passage and on memory examples of its skill, or, with
probability `curriculum.edit_share` (beyond the reference), an edit task: one remembered valid environment of its
skill to write a variant of; an edit that reproduces its parent or any environment in memory (`code_fingerprint`)
is rejected as a duplicate, and a valid edit is stored with its `parent_id`. A failed slot is retried with a new
passage (`curriculum.design_attempts`), each slot at its own pace (`design_slot`); every attempt is stored, valid
or rejected, with the validator's checks, and the designer's trajectory beside it. A slot left empty plays an
earlier valid environment of its skill (`curriculum.reuse_valid_envs`), the one likeliest to give its group
variance. With `curriculum.use_corpus = false` the designer gets no passage. Each design task carries `version`
(the policy version the refresh's admission waited for) as `min_policy_version`: the worker designs on that
version at least.
Without a designer (`curriculum.design = false`) each refresh draws its environments without replacement from the
fixed pool (`curriculum.fixed_envs`, or the seeds; engine/curriculum.py `pool_draw`).

An environment with a hung call is retired by its plays (engine/plays.py `retire`): `Designs.retired` is the set
both share, so a retired environment is never reused nor offered as an edit's parent.

One id names three things of a design: the design task's `task_id` is the environment's `env_id` and the
designer sample's `sample_id` (actors/designer.py), so the sample that wrote an environment is found from it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
import trio

from engine.protocol.config import Config
from engine.protocol.contract import code_fingerprint, env_class_name
from engine.curriculum import (
    ActiveEnv,
    Passage,
    RefreshResult,
    PassageSampler,
    SeedEnvironment,
    active_skills,
    load_environment_folder,
    pool_draw,
    seed_record,
    skill_description,
    slot_skills,
    truncate_words,
)
from engine.metrics.phases import design_round_split
from engine.protocol.messages import DesignResult, DesignTask, MemoryExample, TaskFailed
from engine.plays import retired_envs
from engine.revalidate import revalidate_designs
from engine.rlve import rlve_refresh
from storage.memory import negative_lines, positive_examples
from storage.records import EnvironmentRecord, MemoryRecord, TrajectoryRecord
from storage.store import Store

RunTasks = Callable[[str, list], Awaitable[list]]


def design_id(step: int, slot: int, attempt: int) -> str:
    """The id of a design: its task id, its environment id and its designer sample id."""
    return f"s{step:04d}-e{slot:02d}-a{attempt}"


def design_record(task: DesignTask, result: DesignResult | TaskFailed) -> EnvironmentRecord:
    """The stored environment of one design attempt; a failed task is a rejected design with the worker's reason."""
    common = dict(
        env_id=task.task_id, skill=task.skill, step_created=task.step, source="designed", passage_id=task.passage_id,
        attempt=task.attempt, worker_id=result.worker_id, created_at=time.time(), setting=task.setting,
        parent_id=task.parent_id,
    )
    if isinstance(result, DesignResult):
        return EnvironmentRecord(
            **common, code=result.code, reply=result.reply, hint=result.hint, valid=result.valid, reason=result.reason,
            checks=result.checks, designer_sample_id=result.designer.sample_id,
        )
    return EnvironmentRecord(
        **common, code="", reply="", hint="", valid=False, reason=f"worker error: {result.reason}", checks=[],
        designer_sample_id="",
    )


def duplicate(result: DesignResult, copied: str) -> DesignResult:
    """An edit that reproduces `copied` (its parent or any environment in memory), rejected as a duplicate."""
    reason = f"duplicate: reproduces {copied} (an edit must change the game, not copy it)"
    return msgspec.structs.replace(result, valid=False, reason=reason, checks=[*result.checks, ("novel", False, reason)])


def designer_trajectory(task: DesignTask, result: DesignResult) -> TrajectoryRecord:
    return TrajectoryRecord(
        sample_id=result.designer.sample_id, role="designer", env_id=task.task_id, skill=task.skill, arm="design",
        step=task.step, seed=0, status="designed" if result.valid else "rejected", failure=result.reason,
        episode_return=0.0, turns=[], sample=result.designer, created_at=time.time(),
    )


# Expected unhinted win rates of the seeds by level, for the choice of a failed slot's environment (`reuse`): about
# the rates a random valid action wins (manifest.json: easy 28-58 %, medium 12-22 %); the hard seeds were never won.
SEED_LEVEL_WIN_RATES = {"easy": 0.4, "medium": 0.2, "hard": 0.0}
REUSE_UNKNOWN_WIN_RATE = 0.25


class Designs:
    def __init__(self, config: Config, store: Store, sampler: PassageSampler, rng: random.Random):
        self.config = config
        self.store = store
        self.sampler = sampler
        self.rng = rng
        self.seeds: list[SeedEnvironment] = []
        self._pool: list[SeedEnvironment] | None = None  # the fixed pool, loaded at the first refresh without a designer
        self.retired = retired_envs(store)  # shared with the plays stage, which adds to it (engine/plays.py `retire`)
        self._fingerprints: dict[str, str | None] = {}  # env_id -> code_fingerprint, for the duplicate check of edits
        self._codes: dict[str, str] = {}  # env_id -> whole code of the edit parents' candidates

    def seed_memory(self, seeds: list[SeedEnvironment]) -> None:
        """Store the seed environments as valid and remember them (once; a resumed run finds them there)."""
        self.seeds = list(seeds)
        existing = {r.env_id for r in self.store.memory()}
        with self.store.batch() as batch:
            for seed in seeds:
                env_id = f"seed-{seed.name}"
                if self.store.environment(env_id) is None:
                    batch.put_environment(seed_record(env_id, seed.skill, seed.code, seed.hint, setting=self.config.curriculum.setting))
                if env_id not in existing:
                    batch.put_memory(
                        MemoryRecord(
                            env_id=env_id, skill=seed.skill, name=env_class_name(seed.code), code=seed.code,
                            win_rate=0.5, regret=0.0, step=-1, source="seed", setting=self.config.curriculum.setting,
                        )
                    )

    def task(self, step: int, slot: int, skill: str, attempt: int, memory: list[MemoryRecord], version: int = 0) -> DesignTask:
        c = self.config.curriculum
        if c.edit_share > 0 and self.rng.random() < c.edit_share:
            parent = self.parent(skill, memory)
            if parent is not None:
                return DesignTask(
                    task_id=design_id(step, slot, attempt), skill=skill, skill_description=skill_description(skill),
                    passage_id="", passage="", examples=[], negatives=[], attempt=attempt, step=step, setting=c.setting,
                    parent=parent, parent_id=parent.env_id, edit_mode=c.edit_mode, min_policy_version=version,
                )
        passage = self.sampler.sample() if c.use_corpus else Passage("", "")
        return DesignTask(
            task_id=design_id(step, slot, attempt),
            skill=skill,
            skill_description=skill_description(skill),
            passage_id=passage.passage_id,
            passage=truncate_words(passage.text, c.max_passage_words),
            examples=positive_examples(memory, skill, c.memory_positives, self.rng, c.example_code_chars, setting=c.setting),
            negatives=negative_lines(memory, skill, c.memory_negatives, self.rng, setting=c.setting),
            attempt=attempt,
            step=step,
            setting=c.setting,
            min_policy_version=version,
        )

    def parent(self, skill: str, memory: list[MemoryRecord]) -> MemoryExample | None:
        """An edit task's parent: one remembered valid environment of `skill`, drawn as the positive examples are
        (storage/memory.py) among those the designer could write out in full (at most about 3 characters a token of
        `play.designer_max_tokens`), with its whole code from the store (memory keeps a prefix); None when none fits."""
        c = self.config.curriculum
        fits = [r for r in memory if r.skill == skill and len(self._code(r.env_id)) <= 3 * self.config.play.designer_max_tokens]
        drawn = positive_examples(fits, skill, 1, self.rng, code_chars=0, setting=c.setting)
        if not drawn or not self._code(drawn[0].env_id):
            return None
        return msgspec.structs.replace(drawn[0], code=self._code(drawn[0].env_id))

    def _code(self, env_id: str) -> str:
        """The whole code of a valid, not retired environment in the store ("" otherwise), read once."""
        if env_id not in self._codes:
            record = self.store.environment(env_id)
            self._codes[env_id] = record.code if record is not None and record.valid else ""
        return "" if env_id in self.retired else self._codes[env_id]

    def duplicate_of(self, code: str, task: DesignTask, memory: list[MemoryRecord]) -> str:
        """The env_id of the environment in memory (or the task's parent) that `code` reproduces; "" when none."""
        mine = code_fingerprint(code)
        if mine is None:
            return ""
        for env_id in dict.fromkeys([task.parent_id, *(r.env_id for r in memory)]):
            if env_id not in self._fingerprints:
                record = self.store.environment(env_id) if env_id else None
                self._fingerprints[env_id] = code_fingerprint(record.code) if record is not None else None  # valid or not
            if self._fingerprints[env_id] == mine:
                return env_id
        return ""

    def reuse(self, skill: str, taken: set[str]) -> ActiveEnv | None:
        """An earlier valid environment of this skill not already active (else any seed): the one whose group of plays
        is likeliest to have variance, the highest p(1 - p) for its expected win rate p. A designed environment's p is
        its win rate in memory (its refresh's unhinted plays), a seed's its level's (engine/protocol/data/seeds/manifest.json), and
        p is REUSE_UNKNOWN_WIN_RATE when neither is known. Ties: the newest designed one, then a seed at random."""
        valid = [e for e in self.store.environments() if e.valid and e.env_id not in taken and e.env_id not in self.retired]
        candidates = [e for e in valid if e.skill == skill] or [e for e in valid if e.source == "seed"]
        if not candidates:
            return None
        remembered = {m.env_id: m.win_rate for m in self.store.memory() if m.source == "designed"}
        levels = {f"seed-{s.name}": s.level for s in self.seeds}

        def expected_win_rate(env: EnvironmentRecord) -> float:
            if env.source == "seed":
                return SEED_LEVEL_WIN_RATES.get(levels.get(env.env_id, ""), REUSE_UNKNOWN_WIN_RATE)
            return remembered.get(env.env_id, REUSE_UNKNOWN_WIN_RATE)

        def rank(env: EnvironmentRecord) -> tuple:
            p = expected_win_rate(env)
            return (round(p * (1 - p), 6), env.source == "designed", env.step_created, self.rng.random())

        return ActiveEnv.of(max(sorted(candidates, key=lambda e: e.env_id), key=rank), designed_now=False)

    async def refresh(self, step: int, run_tasks: RunTasks, version: int = 0) -> RefreshResult:
        c = self.config.curriculum
        k = c.refresh_interval
        skills = slot_skills(active_skills(c.skills, c.skills_per_refresh, step // k), c.envs_per_step)
        if self.config.rlve.tasks:  # the RLVE baseline: Reasoning-Gym tasks at the controller's difficulties
            return rlve_refresh(self.store, self.config, step)
        if not c.design:
            return self.fixed(step, skills)
        memory = list(self.store.memory())
        chosen: list[ActiveEnv | None] = [None] * len(skills)
        tally = RefreshResult(active=[], requested=0, valid=0, tokens=0)
        first = [self.task(step, slot, skill, 1, memory, version) for slot, skill in enumerate(skills)]  # in slot order
        async with trio.open_nursery() as nursery:
            for slot, task in enumerate(first):
                nursery.start_soon(self.design_slot, slot, task, memory, version, run_tasks, chosen, tally)
        tally.valid = sum(1 for env in chosen if env is not None)
        for i, env in enumerate(chosen):
            if env is None and c.reuse_valid_envs:
                chosen[i] = self.reuse(skills[i], {e.env_id for e in chosen if e is not None})
        tally.active = [env for env in chosen if env is not None]
        return tally

    async def design_slot(self, slot: int, task: DesignTask, memory: list[MemoryRecord], version: int, run_tasks: RunTasks,
                          chosen: list[ActiveEnv | None], tally: RefreshResult) -> None:
        """One slot's attempts, one after another until one is valid (`chosen[slot]`), each counted in `tally`.
        Every slot goes at its own pace, as in the reference (each game slot retries on its own, all slots
        gathered): a slot whose first design failed early designs again while the others still generate, and
        its validation overlaps their generation. `tally.phase_seconds` sums the slots' own times (they overlap;
        the step account scales them to the refresh's wall time, engine/metrics/phases.py)."""
        phases = tally.phase_seconds
        for attempt in range(1, self.config.curriculum.design_attempts + 1):
            if attempt > 1:
                task = self.task(task.step, slot, task.skill, attempt, memory, version)
            tally.requested += 1
            started = time.monotonic()
            [result] = await run_tasks(f"step {task.step + 1}: designs", [task])  # the slots share one progress count
            revalidating = time.monotonic()
            for part, seconds in design_round_split(revalidating - started, [result]).items():
                phases[part] = phases.get(part, 0.0) + seconds
            [result] = await revalidate_designs(self.config, [task], [result], run_tasks)  # engine/revalidate.py
            phases["revalidation"] = phases.get("revalidation", 0.0) + time.monotonic() - revalidating
            tally.edits_requested += task.parent is not None
            if isinstance(result, DesignResult) and result.valid and task.parent is not None:
                if copied := self.duplicate_of(result.code, task, memory):
                    result = duplicate(result, copied)
                    tally.duplicates += 1
            record = design_record(task, result)
            with self.store.batch() as batch:
                batch.put_environment(record)
                if isinstance(result, DesignResult):
                    tally.tokens += result.tokens_generated
                    tally.edit_replies += result.draws if task.parent is not None else 0
                    batch.put_trajectory(designer_trajectory(task, result))
            if record.valid:
                chosen[slot] = ActiveEnv.of(record, designed_now=True)
                tally.edits_valid += task.parent is not None
                return

    def fixed(self, step: int, skills: list[str]) -> RefreshResult:
        """Without a designer: this refresh's draw from the fixed pool, stored as seed environments when new."""
        c = self.config.curriculum
        if self._pool is None:
            self._pool = load_environment_folder(Path(c.fixed_envs)) if c.fixed_envs else self.seeds
        if not self._pool:
            return RefreshResult(active=[], requested=0, valid=0, tokens=0)
        prefix = "fixed" if c.fixed_envs else "seed"
        drawn = pool_draw(len(self._pool), len(skills), step // c.refresh_interval, self.config.run.seed)
        records = []
        for slot, index in enumerate(drawn):
            env = self._pool[index]
            env_id = f"{prefix}-{env.name}"
            if env_id not in self.retired:
                records.append(self.store.environment(env_id) or seed_record(env_id, env.skill or skills[slot], env.code, env.hint, setting=c.setting))
        with self.store.batch() as batch:
            for record in records:
                batch.put_environment(record)
        return RefreshResult(active=[ActiveEnv.of(r, designed_now=False) for r in records], requested=0, valid=0, tokens=0)
