"""The Reasoning Agent: plays one game episode in the sandbox, turn by turn, and returns its trajectory
(`play_game_episode`; actors/settings.py `for_play` gives a task to its setting's runner, tool use's being
actors/tool_use/agent.py).

First turn: the reference's player prompt around the first observation (with `HINT: ...` appended on the hint
arm), or with `play.agent_prompt = "answer"` one asking for the action only; later turns: the raw observation.
Every reply starts with `play.agent_prefill` (the default's `\boxed{`, given as prompt) and, with
`play.stop_at_action`, ends at the `}` closing that box (`action_stops`). Each reply is reduced to an action by `parse_action`. The return is the
terminal reward clamped to [-1, 1] if the episode terminated, else 0. An exception inside the environment's
`step` ends the episode with return -1 (the reference's rule); a sandbox timeout, crash or limit fails the play,
which is then stored but never trained on. With `play.end_on_cutoff` (the reference) a reply cut off at the token
limit, with no end-of-turn token, ends the episode there, truncated, before it reaches the environment.
"""

from __future__ import annotations

import math
import time

from actors.chat import ChatContext
from actors.parsing import action_stops, parse_action
from actors.prompts import agent_first_message
from actors.sandbox import EpisodeFailed
from engine.protocol.messages import PlayResult, PlayTask, TurnRecord


def episode_return(last_reward: float, terminated: bool) -> float:
    if not terminated or not math.isfinite(last_reward):
        return 0.0
    return max(-1.0, min(1.0, float(last_reward)))


async def play_game_episode(task: PlayTask, *, batcher, pool, tokenizer, play_config, worker_id: str) -> PlayResult:
    started = time.perf_counter()
    chat = ChatContext(tokenizer)
    turns: list[TurnRecord] = []
    status, failure = "truncated", ""
    last_reward, terminated = 0.0, False
    tokens_generated = 0
    forced_return: float | None = None
    try:
        async with pool.open_episode(task.code, max_turns=play_config.max_turns) as episode:
            observation, _ = await episode.reset(seed=task.seed)
            prefill = play_config.agent_prefill  # the start of every reply, as prompt (`play.agent_prefill`)
            stops = action_stops(play_config)  # `play.stop_at_action`: the reply ends with its action
            chat.add_user(agent_first_message(observation, task.hint, play_config.agent_prompt), prefill=prefill)
            for _ in range(play_config.max_turns):
                budget = play_config.max_context_tokens - len(chat) - 1
                if budget < 8:
                    break  # context full: truncated
                generation = await batcher.generate(
                    chat.request("agent", max_new_tokens=min(play_config.agent_max_tokens, budget), temperature=play_config.agent_temperature,
                                 play_config=play_config, stop=stops)
                )
                tokens_generated += len(generation.completion_ids)
                chat.add_assistant(generation)
                if play_config.end_on_cutoff and generation.finish_reason == "length":
                    failure = f"cut off: the reply reached play.agent_max_tokens ({len(generation.completion_ids)} tokens)"
                    break  # truncated, return 0
                action, rule = parse_action(prefill + generation.text)
                try:
                    result = await episode.step(action)
                except EpisodeFailed as exc:
                    if exc.kind != "error":
                        raise
                    turns.append(TurnRecord(action=action, parse_rule=rule, reward=-1.0, terminated=True, truncated=False, policy_version=generation.policy_version, observation_chars=0))
                    status, failure, forced_return = "completed", f"error: {exc.detail}", -1.0
                    break
                turns.append(
                    TurnRecord(
                        action=action,
                        parse_rule=rule,
                        reward=result.reward,
                        terminated=result.terminated,
                        truncated=result.truncated,
                        policy_version=generation.policy_version,
                        observation_chars=len(result.observation),
                    )
                )
                last_reward, terminated = result.reward, result.terminated
                if result.terminated:
                    status = "completed"
                    break
                if result.truncated:
                    break
                chat.add_user(result.observation, prefill=prefill)
    except EpisodeFailed as exc:
        status, failure = "failed", f"{exc.kind}: {exc.detail}"
    value = forced_return if forced_return is not None else episode_return(last_reward, terminated)
    sample = chat.sample(
        sample_id=task.task_id, role="agent", env_id=task.env_id, skill=task.skill, arm=task.arm, step=task.step,
        reward=value if status != "failed" else 0.0, temperature=play_config.agent_temperature,
    )
    return PlayResult(
        task_id=task.task_id,
        worker_id=worker_id,
        env_id=task.env_id,
        arm=task.arm,
        seed=task.seed,
        status=status,
        failure=failure,
        episode_return=sample.reward,
        turns=turns,
        agent=sample,
        tokens_generated=tokens_generated,
        seconds=time.perf_counter() - started,
    )
