"""The tool-use episode (spade-reference.md §8): the agent calls the environment's tools until it answers.

The first user message is the raw first instruction (with `HINT: ...` appended on the hint arm); the tool specs
go through the chat template (actors/tool_use/chat.py). Each reply is read by `parse_reply`: an `<answer>` goes to
`env.step` (reward 1.0 and terminated only when every instruction is complete); else each `<tool_call>` is run in
the sandbox (`play.tool_timeout_s`) and its result comes back as a tool message; tool calls do not advance the
environment's turns, but every reply counts against `play.max_turns`. A reply with neither goes to `env.step` as
is (the environment's format error, -0.1, which the outcome reward ignores); with
`play.mask_malformed_tool_calls` a reply holding an unparsable `<tool_call>` is also taken out of training and the
canonical format is appended to the next message. The return is 1.0 on completion, else 0; a sandbox timeout,
crash or limit fails the play.
"""

from __future__ import annotations

import time

from actors.sandbox import EpisodeFailed
from actors.tool_use.chat import ToolChat
from actors.tool_use.parsing import REMINDER, action_stops, parse_reply, tool_specs, visible
from engine.protocol.messages import PlayResult, PlayTask, TurnRecord

RESULT_CHARS = 4000


def first_message(instruction: str, hint: str) -> str:
    return f"{instruction}\n\nHINT: {hint}" if hint else instruction


def _turn(action: str, rule: str, generation, *, reward=0.0, terminated=False, truncated=False, chars=0) -> TurnRecord:
    return TurnRecord(action=action[:2000], parse_rule=rule, reward=reward, terminated=terminated, truncated=truncated,
                      policy_version=generation.policy_version, observation_chars=chars)


async def play_tool_episode(task: PlayTask, *, batcher, pool, tokenizer, play_config, worker_id: str) -> PlayResult:
    started = time.perf_counter()
    turns: list[TurnRecord] = []
    status, failure = "truncated", ""
    won = False
    tokens_generated = 0
    timeout = getattr(play_config, "tool_timeout_s", None)
    mask_malformed = getattr(play_config, "mask_malformed_tool_calls", False)
    chat = ToolChat(tokenizer, [])
    try:
        async with pool.open_episode(task.code, max_turns=play_config.max_turns) as episode:
            instruction, _ = await episode.reset(seed=task.seed)
            spec = await episode.inspect_tools()
            chat = ToolChat(tokenizer, tool_specs(spec.tools))
            chat.add_user(first_message(instruction, task.hint))
            for _ in range(play_config.max_turns):
                budget = play_config.max_context_tokens - len(chat) - 1
                if budget < 8:
                    break  # context full: truncated
                generation = await batcher.generate(chat.request(
                    "agent", max_new_tokens=min(play_config.agent_max_tokens, budget),
                    temperature=play_config.agent_temperature, play_config=play_config, stop=action_stops(play_config)))
                tokens_generated += len(generation.completion_ids)
                chat.add_assistant(generation)
                if play_config.end_on_cutoff and generation.finish_reason == "length":
                    failure = f"cut off: the reply reached play.agent_max_tokens ({len(generation.completion_ids)} tokens)"
                    break
                parsed = parse_reply(generation.text)
                if parsed.answer is None and parsed.calls:
                    results = []
                    for call in parsed.calls:
                        text = await episode.call_tool(call.name, call.arguments, timeout_s=timeout, max_chars=RESULT_CHARS)
                        results.append((call.name, text))
                        turns.append(_turn(f"{call.name}({call.arguments})", "tool_call", generation, chars=len(text)))
                    if parsed.malformed and mask_malformed:  # some blocks parsed, some did not: still masked
                        chat.mask_last(len(generation.completion_ids))
                        results[-1] = (results[-1][0], f"{results[-1][1]}\n\n{REMINDER}")
                    chat.add_tool_results(results)
                    continue
                action = visible(generation.text)
                try:
                    result = await episode.step(action)
                except EpisodeFailed as exc:
                    if exc.kind != "error":
                        raise
                    turns.append(_turn(action, "error", generation, terminated=True))
                    status, failure = "completed", f"error: {exc.detail}"
                    break
                rule = "answer_tag" if parsed.answer is not None else "malformed_tool_call" if parsed.malformed else "raw"
                turns.append(_turn(parsed.answer if parsed.answer is not None else action, rule, generation, reward=result.reward,
                                   terminated=result.terminated, truncated=result.truncated, chars=len(result.observation)))
                if result.terminated:
                    status, won = "completed", result.reward >= 1.0
                    break
                if result.truncated:
                    break
                observation = result.observation
                if parsed.malformed and mask_malformed:
                    chat.mask_last(len(generation.completion_ids))
                    observation = f"{observation}\n\n{REMINDER}"
                chat.add_user(observation)
    except EpisodeFailed as exc:
        status, failure = "failed", f"{exc.kind}: {exc.detail}"
    value = 1.0 if won and status == "completed" else 0.0
    sample = chat.sample(
        sample_id=task.task_id, role="agent", env_id=task.env_id, skill=task.skill, arm=task.arm, step=task.step,
        reward=value, temperature=play_config.agent_temperature,
    )
    return PlayResult(
        task_id=task.task_id, worker_id=worker_id, env_id=task.env_id, arm=task.arm, seed=task.seed, status=status,
        failure=failure, episode_return=sample.reward, turns=turns, agent=sample, tokens_generated=tokens_generated,
        seconds=time.perf_counter() - started,
    )
