"""Playing a suite with one model: every item not yet in the results, many at once over one batched backend.

    await evaluate_model(model, suite, results, make_backend=..., config=..., concurrency=8, progress=progress)

Each item is played as its kind says (rg: actors/reasoning_gym/play.py; math / science: one reply scored by
actors/evaluation/scoring.py; code: the reply's code and the item's tests run in the sandbox pool; env: the
agent's own episode, actors/agent.py `play_game_episode`, win = return > 0) and its row is written at once. Whatever
goes wrong inside one episode (a hostile solution, a hung scorer, a problem that cannot be made) scores it 0 with
the reason in the row's `failure`; the evaluation goes on.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable

import msgspec
import trio

from actors.chat import ChatContext, with_chat_template_kwargs
from actors.evaluation import scoring
from actors.parsing import after_thinking
from actors.reasoning_gym.play import play_problem
from actors.reasoning_gym.process import ReasoningGymError, ReasoningGymProcess
from actors.evaluation.suites import Item, Suite
from engine.protocol.messages import PlayTask


class ModelRef(msgspec.Struct, frozen=True, kw_only=True):
    id: str  # the results key: backend and resolved folder
    label: str  # the table's column
    path: str


class Progress:
    """A bar on a terminal; plain lines (about every 5%) elsewhere, so logs stay readable."""

    def __init__(self, total: int, stream=None):
        self.total, self.done, self.wins = total, 0, 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self.label = ""
        self._next_line = 0

    def advance(self, win: bool) -> None:
        self.done += 1
        self.wins += bool(win)
        rate = time.monotonic() - self.started
        text = f"{self.label} {self.done}/{self.total} episodes, {self.wins} won, {rate:.0f} s"
        if self.tty:
            width = 30
            filled = int(width * self.done / max(1, self.total))
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {text}\x1b[K")
            if self.done >= self.total:
                self.stream.write("\n")
        elif self.done >= self._next_line or self.done >= self.total:
            self.stream.write(f"eval: {text}\n")
            self._next_line = self.done + max(1, self.total // 20)
        self.stream.flush()

    def note(self, line: str) -> None:
        self.stream.write(("\n" if self.tty and 0 < self.done < self.total else "") + line + "\n")
        self.stream.flush()


def oracle_reply(item: Item, reference: str | None) -> str:
    """What the oracle answers: the item's own reference answer, in the format its suite asks for."""
    if item.kind == "rg":
        return f"<answer>{reference}</answer>" if reference is not None else "I do not know."
    return item.reference or "I do not know."


async def _reply(item: Item, chat: ChatContext, batcher, play_config, settings):
    generation = await batcher.generate(chat.request(
        "agent", max_new_tokens=max(1, min(settings.max_tokens, play_config.max_context_tokens - len(chat) - 1)),
        temperature=settings.temperature, play_config=play_config,
    ))
    chat.add_assistant(generation)
    return generation


async def play_item(item: Item, *, settings, batcher, tokenizer, play_config, pool, rg: ReasoningGymProcess | None,
                    oracle=None, answer: Callable[[Item, str | None], str] = oracle_reply) -> dict:
    """One episode: {score, win, answer, failure, reply, tokens}."""
    if item.kind == "rg":
        try:
            question, reference = await rg.problem(item.rg)
        except ReasoningGymError as exc:
            return {"score": 0.0, "win": False, "answer": None, "failure": f"problem: {exc}", "reply": "", "tokens": 0}
        if oracle is not None:
            oracle.expect(question, answer(item, reference))
        o = await play_problem(item.rg, batcher=batcher, tokenizer=tokenizer, play_config=play_config, process=rg, question=question)
        return {"score": o.score, "win": o.win, "answer": o.answer, "failure": o.failure, "reply": "\n---\n".join(o.replies), "tokens": o.tokens}
    if item.kind == "env":
        from actors.settings import for_play

        task = PlayTask(task_id=f"eval-{item.dataset}-{item.episode}", env_id=item.dataset, skill=item.skill, code=item.code,
                        hint=item.hint, arm="hint" if item.hint else "no_hint", seed=item.seed, step=0)
        r = await for_play(task).play(task, batcher=batcher, pool=pool, tokenizer=tokenizer, play_config=play_config, worker_id="eval")
        win = r.status != "failed" and r.episode_return > 0
        return {"score": r.episode_return, "win": win, "answer": r.turns[-1].action if r.turns else None,
                "failure": r.failure, "reply": "", "tokens": r.tokens_generated}
    chat = ChatContext(tokenizer)
    chat.add_user(item.prompt)
    if oracle is not None:
        oracle.expect(item.prompt, answer(item, item.reference))
    generation = await _reply(item, chat, batcher, play_config, settings)
    text, failure = after_thinking(generation.text), ""  # scored after the reply's thinking
    if item.kind == "math":
        score, got = scoring.score_math(text, item.answer)
    elif item.kind == "science":
        score, got = scoring.score_science(text, item.answer, item.choices)
    else:
        score, got, failure = await _run_code(item, text, pool)
    return {"score": score, "win": score >= 1.0, "answer": got, "failure": failure, "reply": generation.text,
            "tokens": len(generation.completion_ids)}


async def _run_code(item: Item, reply: str, pool) -> tuple[float, str | None, str]:
    from actors.sandbox import EpisodeFailed

    code = scoring.candidate_code(reply)
    if code is None:
        return 0.0, None, ""
    source = scoring.code_test_environment(code, item.tests)
    try:
        async with pool.open_episode(source, max_turns=1) as episode:
            await episode.reset(seed=0)
            result = await episode.step("run the tests")
    except EpisodeFailed as exc:
        return 0.0, code, f"{exc.kind}: {exc.detail}"[:500]
    return (1.0 if result.terminated and result.reward >= 1.0 else 0.0), code, ""


def _open_pool(config, workers: int):
    from actors.sandbox import SandboxSettings, open_sandbox_pool

    return open_sandbox_pool(SandboxSettings.from_config(config.sandbox, workers=workers))


def result_key(model: ModelRef, suite: Suite, item: Item) -> tuple[str, str, str, str]:
    return (model.id, suite.key, item.dataset, item.episode)


async def evaluate_model(model: ModelRef, suite: Suite, results, *, make_backend, config, play_config, concurrency: int,
                         progress: Progress, rg: ReasoningGymProcess | None, answer=oracle_reply) -> int:
    """Play every item of `suite` that `results` lacks for `model`; returns how many were played."""
    from actors.evaluation.oracle import OracleBackend

    todo = [item for item in suite.items if not results.done(result_key(model, suite, item))]
    if not todo:
        return 0
    progress.label = model.label
    backend = await trio.to_thread.run_sync(make_backend, model.path)
    oracle = backend if isinstance(backend, OracleBackend) else None
    needs_pool = any(item.kind in ("code", "env") for item in todo)
    try:
        await _play_all(model, suite, results, todo, backend, oracle, needs_pool, config=config, play_config=play_config,
                        concurrency=concurrency, progress=progress, rg=rg, answer=answer)
    finally:  # the next model's backend starts with this one's processes and memory given back (vLLM's engine core)
        if hasattr(backend, "close"):
            with trio.CancelScope(shield=True):  # also after Ctrl-C
                await trio.to_thread.run_sync(backend.close)
    return len(todo)


async def _play_all(model, suite, results, todo, backend, oracle, needs_pool, *, config, play_config, concurrency,
                    progress, rg, answer) -> None:
    from actors.inference.batcher import Batcher

    async with contextlib.AsyncExitStack() as stack:
        pool = await stack.enter_async_context(_open_pool(config, max(1, min(concurrency, config.sandbox.workers)))) if needs_pool else None
        nursery = await stack.enter_async_context(trio.open_nursery())
        batcher = Batcher(backend, max_batch=config.inference.max_batch, wait_s=config.inference.batch_wait_s)
        await nursery.start(batcher.run)
        limiter = trio.CapacityLimiter(concurrency)
        tokenizer = with_chat_template_kwargs(backend.tokenizer, config.model.chat_template_kwargs)  # model.chat_template_kwargs

        async def one(item: Item) -> None:
            async with limiter:
                started = time.perf_counter()
                outcome = await play_item(item, settings=suite.settings, batcher=batcher, tokenizer=tokenizer,
                                          play_config=play_config, pool=pool, rg=rg, oracle=oracle, answer=answer)
            results.add({
                "model": model.id, "label": model.label, "suite": suite.key, "dataset": item.dataset, "family": item.family,
                "episode": item.episode, **outcome, "reply": outcome["reply"][:2000],
                "seconds": round(time.perf_counter() - started, 3), "time": time.time(),
            })
            progress.advance(outcome["win"])

        async with trio.open_nursery() as episodes:
            for item in todo:
                episodes.start_soon(one, item)
        nursery.cancel_scope.cancel()
