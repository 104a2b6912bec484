"""One environment instance in one sandbox worker: what a player drives, obtained from `SandboxPool.open_episode`.

Every call has the step's time limit (`sandbox.step_timeout_s`), cut to what is left of the episode's own clock
(`sandbox.episode_timeout_s`), which counts only the time spent inside calls into the environment (load, reset,
step, tool calls), not the time between them, when the player waits for the model: a slow or busy generator does
not end plays. The whole play's wall clock, model waits included, has its own generous bound
(`sandbox.play_timeout_s`, kept by `SandboxPool.open_episode`), so a play stuck anywhere still ends. A failure of any
kind is kept, and later calls raise it again, so the pool can count it and retire the worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import trio

from actors.sandbox import protocol
from actors.sandbox.errors import FAILURE_KINDS, EpisodeFailed
from actors.sandbox.process import SPIN_NS, WorkerGone, WorkerProcess

if TYPE_CHECKING:
    from actors.sandbox.pool import SandboxPool

LOAD_SPIN_NS = 150_000  # loading a source the worker has compiled before takes about 60 us


class StepResult(msgspec.Struct, frozen=True):
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


def episode_clock_failure(episode_timeout_s: float) -> EpisodeFailed:
    """The environment's own time in one episode passed `sandbox.episode_timeout_s` (counted in a step's metrics
    as `plays_ended_by_clock`: engine/metrics/steps.py reads the words "the episode took longer")."""
    return EpisodeFailed("timeout", f"the episode took longer than {episode_timeout_s:.3g} s of the environment's "
                                    f"own time (sandbox.episode_timeout_s; the wait for the model is not counted)")


def play_clock_failure(play_timeout_s: float) -> EpisodeFailed:
    """The whole play, the wait for the model included, passed `sandbox.play_timeout_s` (a stuck play; counted as
    `plays_ended_by_clock` too: "the play took longer")."""
    return EpisodeFailed("timeout", f"the play took longer than {play_timeout_s:.3g} s of wall clock, the wait for "
                                    f"the model included (sandbox.play_timeout_s)")


class Episode:
    """One environment instance in one worker; obtained from `SandboxPool.open_episode`."""

    def __init__(self, pool: SandboxPool, worker: WorkerProcess, max_turns: int | None) -> None:
        self._pool = pool
        self._worker = worker
        self._max_turns = max_turns
        self.env_seconds = 0.0  # time spent inside calls into the environment: what episode_timeout_s bounds
        self._failure: EpisodeFailed | None = None
        self.class_name = ""
        self.has_solution = False
        self.turns = 0
        self.cleanup_problem = ""  # set when the episode closes: what it left behind, if anything
        self.closed = False

    @property
    def failure(self) -> EpisodeFailed | None:
        return self._failure

    async def _call(self, message: protocol.Request, spin_ns: int = SPIN_NS, sent: bool = False,
                    timeout_s: float | None = None) -> protocol.Reply:
        if self.closed:  # the worker may be serving someone else by now
            raise trio.ClosedResourceError("the episode is closed")
        if self._failure is not None:
            raise EpisodeFailed(self._failure.kind, f"the episode already failed: {self._failure.detail}")
        worker = self._worker
        config = self._pool.config
        await trio.lowlevel.checkpoint()
        episode_left = config.episode_timeout_s - self.env_seconds
        if episode_left <= 0:
            raise self._fail(episode_clock_failure(config.episode_timeout_s))
        limit = min(config.step_timeout_s if timeout_s is None else timeout_s, episode_left)
        worker.trusted = False  # until a whole reply is back: a cancellation in between leaves it unusable
        started = trio.current_time()
        try:
            if not sent:
                worker.start_request(message)
            reply = worker.reply_nowait(spin_ns)
            if reply is None:
                with trio.move_on_after(limit) as scope:
                    reply = await worker.finish_request()
                if scope.cancelled_caught:
                    if episode_left <= limit:
                        raise episode_clock_failure(config.episode_timeout_s)
                    raise EpisodeFailed("timeout", f"the call took longer than {limit:.3g} s")
        except WorkerGone as gone:
            raise self._fail(gone.failure) from None
        except EpisodeFailed as failure:
            raise self._fail(failure) from None
        finally:
            self.env_seconds += trio.current_time() - started
        worker.trusted = True
        if isinstance(reply, protocol.Failed):
            kind = reply.kind if reply.kind in FAILURE_KINDS else "protocol"
            raise self._fail(EpisodeFailed(kind, reply.detail))
        return reply

    def _fail(self, failure: EpisodeFailed) -> EpisodeFailed:
        self._failure = failure
        return failure

    def _expect(self, reply: protocol.Reply, kind: type) -> Any:
        if not isinstance(reply, kind):
            self._worker.trusted = False
            raise self._fail(EpisodeFailed("protocol", f"unexpected {type(reply).__name__} reply"))
        return reply

    async def _load(self, source: str, sent: bool = False) -> None:
        """Load the source (`sent`: the Load frame is already on its way, only read the reply)."""
        reply = self._expect(await self._call(protocol.Load(source=source), spin_ns=LOAD_SPIN_NS, sent=sent),
                             protocol.Loaded)
        self.class_name = reply.class_name
        self.has_solution = reply.has_solution

    async def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        reply = self._expect(await self._call(protocol.Reset(seed=seed)), protocol.ResetDone)
        self.turns = 0
        return reply.observation, reply.info

    async def step(self, action: str) -> StepResult:
        if not isinstance(action, str):
            raise TypeError(f"action must be str, got {type(action).__name__}")
        reply = self._expect(await self._call(protocol.Step(action=action)), protocol.StepDone)
        self.turns += 1
        truncated = reply.truncated or (self._max_turns is not None and self.turns >= self._max_turns)
        return StepResult(reply.observation, reply.reward, reply.terminated, truncated, reply.info)

    async def call_tool(self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None,
                        max_chars: int = 4000) -> str:
        """One tool call of a tool-use environment (its own timeout); error text for unknown tools and exceptions."""
        message = protocol.CallTool(name=name, arguments=arguments, max_chars=max_chars)
        return self._expect(await self._call(message, timeout_s=timeout_s), protocol.ToolDone).result

    async def inspect_tools(self) -> protocol.Inspected:
        return self._expect(await self._call(protocol.InspectTools()), protocol.Inspected)

    async def solution(self) -> list[str] | None:
        reply = self._expect(await self._call(protocol.Solution()), protocol.SolutionDone)
        return reply.actions
