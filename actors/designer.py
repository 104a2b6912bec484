"""The Environment Designer and the hint writer: one design attempt from prompt to verdict.

1. Prompt the policy (designer role) with the passage, the spec, memory examples and the skill; or, in an edit
   task, with one remembered valid environment to write a variant of: new values for its integer constants
   (`curriculum.edit_mode = "numbers"`, actors/edits.py; at `play.edit_temperature`; a reply that copies the parent
   is drawn again, up to `play.edit_draws` replies, and only the kept one is trained) or its whole code ("code").
   A fresh design or code edit is prefilled with the start of a ```python block (`play.designer_prefill`), a
   scaffold small models need.
2. Extract the code; the validator repairs f-string braces, then runs static and sandboxed dynamic checks.
3. For a valid design, ask the same policy (hint role, low temperature, not trained) for a privileged hint from
   the code alone (up to `play.hint_attempts` calls, backing off after a call that raised; an empty hint is a
   failed call too), then check in the sandbox that the hint never appears in an observation. A design whose
   hint calls all failed stays valid with no hint: the engine gives it no hinted plays and regret 0.
`play.quality_checks = false` validates as the reference does (engine/protocol/config.py; actors/sandbox/validator.py).
The designer's tokens come back as a training sample whose reward the engine fills in k steps later.
"""

from __future__ import annotations

import time

import trio

from actors.chat import ChatContext
from actors.parsing import clean_hint, extract_code
from actors.edits import numbers, parse_numbers, with_numbers
from actors.prompts import (
    HINT_SYSTEM,
    NUMBERS_PREFILL,
    edit_numbers_message,
    edit_user_message,
    hint_user_message,
)
from actors.settings import validate_environment
from actors.settings import SETTINGS
from engine.protocol.contract import code_fingerprint
from engine.protocol.messages import DesignResult, DesignTask

# Validation plays up to the reference's turn cap; during training the pool caps episodes at play.max_turns.
VALIDATION_MAX_TURNS = 25


async def write_hint(code: str, *, batcher, tokenizer, play_config, system: str = HINT_SYSTEM) -> tuple[str, int]:
    """The hint ("" when every call failed) and the tokens the calls generated."""
    tokens = 0
    for attempt in range(play_config.hint_attempts):
        chat = ChatContext(tokenizer, system=system)
        chat.add_user(hint_user_message(code))
        request = chat.request("hint", max_new_tokens=play_config.hint_max_tokens, temperature=play_config.hint_temperature, play_config=play_config)
        try:
            generation = await batcher.generate(request)
        except Exception:  # a failed call is retried (the reference: 3 attempts, 1 / 2 / 4 s apart)
            if attempt + 1 < play_config.hint_attempts:
                await trio.sleep(play_config.hint_retry_backoff_s * 2**attempt)
            continue
        tokens += len(generation.completion_ids)
        hint = clean_hint(generation.text)
        if hint:
            return hint, tokens
    return "", tokens


async def design_environment(task: DesignTask, *, batcher, pool, tokenizer, play_config, worker_id: str) -> DesignResult:
    started = time.perf_counter()
    setting = SETTINGS[task.setting]  # its designer and hint prompts (actors/settings.py)
    chat = ChatContext(tokenizer, system=setting.designer_system)
    prefill, max_tokens, temperature = play_config.designer_prefill, play_config.designer_max_tokens, play_config.designer_temperature
    found = numbers(task.parent.code) if task.parent is not None and task.edit_mode == "numbers" else []
    if found:  # a number edit: new values for the parent's integer constants (a parent with none gets a code edit)
        prompt = edit_numbers_message(task, [value for *_, value in found])
        prefill, max_tokens, temperature = NUMBERS_PREFILL, min(max_tokens, 8 + 4 * len(found)), play_config.edit_temperature
    elif task.parent is not None:  # a code edit: the whole code of a variant
        prompt = edit_user_message(task)
    else:
        prompt = setting.design_prompt(task, play_config, VALIDATION_MAX_TURNS)
    chat.add_user(prompt, prefill=prefill)
    request = chat.request("designer", max_new_tokens=max_tokens, temperature=temperature, play_config=play_config)
    tokens, draws, parent = 0, 0, code_fingerprint(task.parent.code) if found else None
    while True:  # a number edit that copies its parent is drawn again, up to play.edit_draws replies; the last is kept
        generation = await batcher.generate(request)
        tokens, draws = tokens + len(generation.completion_ids), draws + 1
        reply = prefill + generation.text
        code = with_numbers(task.parent.code, found, parse_numbers(reply, len(found))) if found else extract_code(reply)
        if not found or draws >= play_config.edit_draws or code_fingerprint(code) != parent:
            break
    chat.add_assistant(generation)
    hint = ""
    quality = play_config.quality_checks
    clock = time.perf_counter()
    verdict = await validate_environment(pool, code, max_turns=VALIDATION_MAX_TURNS, quality_checks=quality)
    validate_s, hint_s = time.perf_counter() - clock, 0.0
    if verdict.valid:
        code = verdict.source
        clock = time.perf_counter()
        hint, hint_tokens = await write_hint(code, batcher=batcher, tokenizer=tokenizer, play_config=play_config,
                                             system=setting.hint_system)
        hint_s = time.perf_counter() - clock
        tokens += hint_tokens
        if hint:
            clock = time.perf_counter()
            verdict = await validate_environment(pool, code, hint=hint, max_turns=VALIDATION_MAX_TURNS, quality_checks=quality)
            validate_s += time.perf_counter() - clock
    sample = chat.sample(
        sample_id=task.task_id, role="designer", env_id=task.task_id, skill=task.skill, arm="design", step=task.step,
        reward=0.0, temperature=temperature,
    )
    return DesignResult(
        task_id=task.task_id,
        worker_id=worker_id,
        skill=task.skill,
        passage_id=task.passage_id,
        attempt=task.attempt,
        reply=reply,
        code=verdict.source if verdict.source else code,
        valid=verdict.valid,
        reason=verdict.reason,
        checks=[(c.name, c.passed, c.detail) for c in verdict.checks],
        hint=hint,
        designer=sample,
        tokens_generated=tokens,
        seconds=time.perf_counter() - started,
        draws=draws,
        validate_s=validate_s,
        hint_s=hint_s,
    )
