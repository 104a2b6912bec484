"""A design its worker claims valid is validated again before it is played (`curriculum.revalidate`, default on).

    results = await revalidate_designs(config, tasks, results, run_tasks)   # engine/refresh.py, after each attempt

The engine cannot run model-written code itself (it holds no sandbox), and the worker that wrote a design is a
peer whose verdict is a claim. So every `DesignResult` with `valid = True` goes out again as a `ValidateTask`
through the dispatcher; the worker that gets it runs the validator (actors/revalidate.py) on the code and the
hint, and answers a `ValidateResult`. A worker other than the author validates in its own sandbox pool; the
author (with one worker, always) validates in a fresh sandbox process, one that never ran its first validation.
Only a confirmed design stays valid, with a `revalidation` check saying who confirmed it and how; a design that
fails, or whose validation task failed, is stored as rejected with the reason ("revalidation by w1: ...").

Cost: one sandboxed validation per valid design, plus opening a one-process sandbox pool when the author does it.
"""

from __future__ import annotations

import msgspec

from engine.protocol.config import Config
from engine.protocol.messages import DesignResult, DesignTask, TaskFailed, ValidateResult, ValidateTask
from engine.protocol.transport import short_id

CHECK = "revalidation"
REASON_CHARS = 2000


def validate_task(task: DesignTask, result: DesignResult) -> ValidateTask:
    return ValidateTask(
        task_id=f"{task.task_id}-revalidate", env_id=task.task_id, skill=task.skill, code=result.code, hint=result.hint,
        author=result.worker_id, step=task.step,
    )


def confirmed(result: DesignResult, answer: ValidateResult | TaskFailed) -> DesignResult:
    """`result` as the revalidation leaves it: valid with a passed `revalidation` check, or rejected with the reason."""
    if isinstance(answer, ValidateResult):
        by_author = answer.worker_id == result.worker_id
        who = f"{short_id(answer.worker_id, 40)} ({'its author, in a fresh sandbox process' if by_author else 'another worker'})"
        if answer.valid:
            return msgspec.structs.replace(result, checks=[*result.checks, (CHECK, True, f"confirmed by {who}")])
        reason = f"{CHECK} by {short_id(answer.worker_id, 40)}: {answer.reason}"
        checks = [*result.checks, (CHECK, False, f"refuted by {who}: {answer.reason}")]
    else:
        reason = f"{CHECK} failed: {answer.reason}"
        checks = [*result.checks, (CHECK, False, reason)]
    return msgspec.structs.replace(result, valid=False, reason=reason[:REASON_CHARS], checks=checks)


async def revalidate_designs(config: Config, tasks: list[DesignTask], results: list, run_tasks) -> list:
    """`results` (one per task) with every design claimed valid confirmed or refuted by a second validation."""
    if not config.curriculum.revalidate:
        return results
    claimed = [i for i, r in enumerate(results) if isinstance(r, DesignResult) and r.valid]
    if not claimed:
        return results
    checks = [validate_task(tasks[i], results[i]) for i in claimed]
    answers = await run_tasks(f"step {tasks[0].step + 1}: revalidating {len(checks)} design{'s' * (len(checks) != 1)}", checks)
    out = list(results)
    for i, answer in zip(claimed, answers):
        out[i] = confirmed(results[i], answer)
    return out
