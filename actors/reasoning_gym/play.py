"""One Reasoning-Gym problem played by the agent: the question, up to `max_turns` replies, the dataset's own score.

    outcome = await play_problem(rg, batcher=..., tokenizer=..., play_config=..., process=reasoning_gym_process())
    result = await play_reasoning_gym(task, batcher=..., pool=..., tokenizer=..., play_config=..., worker_id=...)

The first turn is the question with the instruction to answer inside <answer></answer> tags (the SPADE evaluation's
format); a reply without the tags gets one format reminder while turns are left. The answer (the last tagged one)
is scored by `dataset.score_answer(answer, entry)` in the Reasoning-Gym process (worker.py); a win is a score
>= 1, and the episode's return is 1.0 for a win, else 0.0. `play_reasoning_gym` is the worker's runner
(actors/settings.py) for a PlayTask that carries a Reasoning-Gym problem (engine/protocol/messages.py
`REASONING_GYM_PREFIX`): the RLVE baseline's training plays and the in-loop rg-hard evaluation; its result is an
ordinary PlayResult.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import msgspec

from actors.chat import ChatContext
from actors.parsing import after_thinking
from actors.reasoning_gym.process import ReasoningGymError, ReasoningGymProcess, reasoning_gym_process
from engine.protocol.messages import PlayResult, PlayTask, ReasoningGymTask, TurnRecord, decode_reasoning_gym_task

ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
INSTRUCTION = (
    "Solve the problem. Think it through, then give your final answer inside <answer></answer> tags, "
    "for example <answer>42</answer>; only what is inside the tags is graded."
)
REMINDER = "Your reply had no <answer></answer> tags. Give your final answer inside <answer></answer> tags."


def rg_prompt(question: str) -> str:
    return f"{question.rstrip()}\n\n{INSTRUCTION}"


def tagged_answer(reply: str) -> str | None:
    """The content of the last <answer>...</answer> after the reply's thinking, or None (a malformed reply)."""
    found = ANSWER_TAG.findall(after_thinking(reply))  # tags inside the thinking are drafts
    return found[-1].strip() if found else None


@dataclass
class Outcome:
    """How one problem went: the context played (a training sample for the worker's path), the score."""

    chat: ChatContext
    question: str
    answer: str | None  # None: no tagged answer in any turn (malformed)
    score: float
    win: bool
    failure: str  # "" unless scoring failed ("score: timeout: ...")
    turns: list[TurnRecord]
    tokens: int
    replies: list[str]


async def play_problem(
    rg: ReasoningGymTask, *, batcher, tokenizer, play_config, process: ReasoningGymProcess, question: str | None = None
) -> Outcome:
    """Play `rg` (its question is fetched unless given). Raises ReasoningGymError when the problem cannot be made."""
    if question is None:
        question, _ = await process.problem(rg)
    chat = ChatContext(tokenizer)
    chat.add_user(rg_prompt(question))
    max_tokens = rg.max_tokens or play_config.agent_max_tokens
    temperature = rg.temperature if rg.temperature >= 0 else play_config.agent_temperature
    answer, turns, replies, tokens = None, [], [], 0
    for turn in range(max(1, rg.max_turns)):
        budget = play_config.max_context_tokens - len(chat) - 1
        if budget < 8:
            break
        generation = await batcher.generate(
            chat.request("agent", max_new_tokens=min(max_tokens, budget), temperature=temperature, play_config=play_config)
        )
        tokens += len(generation.completion_ids)
        chat.add_assistant(generation)
        replies.append(generation.text)
        answer = tagged_answer(generation.text)
        last = answer is not None or turn + 1 >= rg.max_turns
        turns.append(TurnRecord(
            action=(answer if answer is not None else generation.text)[:500], parse_rule="answer_tag" if answer is not None else "raw",
            reward=0.0, terminated=answer is not None, truncated=last and answer is None,
            policy_version=generation.policy_version, observation_chars=0 if last else len(REMINDER),
        ))
        if answer is not None:
            break
        if not last:
            chat.add_user(REMINDER)
    score, failure = (await process.score(rg, answer)) if answer is not None else (0.0, "")
    if turns and answer is not None:
        turns[-1] = msgspec.structs.replace(turns[-1], reward=1.0 if score >= 1.0 else 0.0)
    return Outcome(chat=chat, question=question, answer=answer, score=score, win=score >= 1.0, failure=failure,
                   turns=turns, tokens=tokens, replies=replies)


async def play_reasoning_gym(task: PlayTask, *, batcher, pool=None, tokenizer, play_config, worker_id: str) -> PlayResult:
    """The worker's path for a PlayTask carrying a Reasoning-Gym problem: an ordinary PlayResult, return 1 for a win."""
    del pool  # no sandbox: the problem is a trusted library's, the answer is scored in the Reasoning-Gym process
    started = time.perf_counter()
    rg = decode_reasoning_gym_task(task.code)
    assert rg is not None, "play_reasoning_gym needs a Reasoning-Gym task"
    try:
        outcome = await play_problem(rg, batcher=batcher, tokenizer=tokenizer, play_config=play_config, process=reasoning_gym_process())
    except ReasoningGymError as exc:
        chat = ChatContext(tokenizer)
        sample = chat.sample(sample_id=task.task_id, role="agent", env_id=task.env_id, skill=task.skill, arm=task.arm,
                             step=task.step, reward=0.0, temperature=play_config.agent_temperature)
        return PlayResult(task_id=task.task_id, worker_id=worker_id, env_id=task.env_id, arm=task.arm, seed=task.seed,
                          status="failed", failure=f"reasoning-gym: {exc}", episode_return=0.0, turns=[], agent=sample,
                          tokens_generated=0, seconds=time.perf_counter() - started)
    value = 1.0 if outcome.win else 0.0
    temperature = rg.temperature if rg.temperature >= 0 else play_config.agent_temperature
    sample = outcome.chat.sample(sample_id=task.task_id, role="agent", env_id=task.env_id, skill=task.skill, arm=task.arm,
                                 step=task.step, reward=value, temperature=temperature)
    return PlayResult(
        task_id=task.task_id, worker_id=worker_id, env_id=task.env_id, arm=task.arm, seed=task.seed,
        status="completed" if outcome.answer is not None else "truncated", failure=outcome.failure,
        episode_return=value, turns=outcome.turns, agent=sample, tokens_generated=outcome.tokens,
        seconds=time.perf_counter() - started,
    )
