"""The worker's side of re-validation (engine/revalidate.py): validate a design another worker claimed valid.

    nursery.start_soon(answer_validation, sock, task, pool, config, worker_id)   # actors/worker.py, per ValidateTask

The validator runs on the design's code with its hint (the same checks the designer's final verdict ran,
actors/designer.py). A worker that is not the design's author uses its sandbox pool; the author (the engine's
only worker, or the one the dispatcher happened to pick) opens a fresh one-process pool for it, so the verdict
never comes from a sandbox process that ran its first validation. The answer says which (`sandbox`).
"""

from __future__ import annotations

import sys
import time
import traceback

from actors.designer import VALIDATION_MAX_TURNS
from actors.sandbox import SandboxSettings, open_sandbox_pool
from actors.settings import validate_environment
from engine.protocol.messages import TaskFailed, ValidateResult, ValidateTask


async def revalidate(task: ValidateTask, *, pool, config, worker_id: str) -> ValidateResult:
    started = time.perf_counter()
    options = dict(hint=task.hint or None, max_turns=VALIDATION_MAX_TURNS, quality_checks=config.play.quality_checks)
    if task.author == worker_id:
        async with open_sandbox_pool(SandboxSettings.from_config(config.sandbox, workers=1)) as fresh:
            verdict = await validate_environment(fresh, task.code, **options)
    else:
        verdict = await validate_environment(pool, task.code, **options)
    return ValidateResult(
        task_id=task.task_id, worker_id=worker_id, env_id=task.env_id, valid=verdict.valid, reason=verdict.reason,
        checks=[(c.name, c.passed, c.detail) for c in verdict.checks],
        sandbox="fresh_process" if task.author == worker_id else "other_worker", seconds=time.perf_counter() - started,
    )


async def answer_validation(sock, task: ValidateTask, pool, config, worker_id: str) -> None:
    try:
        result = await revalidate(task, pool=pool, config=config, worker_id=worker_id)
    except Exception as exc:  # isolation boundary: the validation fails, the worker goes on
        detail = "".join(traceback.format_exception_only(exc)).strip()
        print(f"[{worker_id}] validation {task.task_id} failed: {detail}", file=sys.stderr, flush=True)
        traceback.print_exc()
        result = TaskFailed(task_id=task.task_id, worker_id=worker_id, reason=detail[:2000])
    await sock.send(result)
