"""The episode's two clocks: `sandbox.episode_timeout_s` counts the environment's own time (inside its calls), not
the wait for the model between them; `sandbox.play_timeout_s` bounds the whole play's wall clock, model waits
included. A play ended by either is counted in the step's metrics as `plays_ended_by_clock`.

Time is trio's MockClock, so no verdict depends on how busy the machine is: with rate 0 nothing but the test moves
it (`clock.jump` stands in for a long wait for the model, or for an environment call that takes long), so the real
sandbox processes run as usual while the clocks read only what the test says.
"""

from types import SimpleNamespace

import pytest
import trio
import trio.testing

from actors.agent import play_game_episode
from actors.sandbox import EpisodeFailed, SandboxSettings, open_sandbox_pool, protocol
from actors.sandbox.episode import Episode, episode_clock_failure, play_clock_failure
from engine.metrics.steps import StepOutcome, ended_by_clock, step_metrics
from engine.plays import hung
from engine.protocol.config import PlayConfig
from engine.protocol.messages import PlayResult, PlayTask
from tests.actors.agent_helpers import FakeTokenizer
from tests.actors.sandbox.sandbox_helpers import GUESS_SOURCE
from tests.actors.test_agent import PICK, FakeBatcher
from tests.engine.builders import make_sample

MODEL_WAIT_S = 600.0  # one reply of a slow generator, far past every episode bound below


def run_with_mock_clock(body, **pool_options):
    """`body(pool, clock)` on a real one-worker pool, under a clock that only the test moves."""
    clock = trio.testing.MockClock(rate=0)

    async def main():
        async with open_sandbox_pool(**{"workers": 1, "step_timeout_s": 30.0, **pool_options}) as pool:
            return await body(pool, clock)

    return trio.run(main, clock=clock)


def test_long_waits_for_the_model_do_not_end_the_episode():
    async def body(pool, clock):
        async with pool.open_episode(GUESS_SOURCE) as episode:
            await episode.reset(seed=0)
            for _ in range(5):
                clock.jump(MODEL_WAIT_S)  # the player waits for its reply: 50 minutes in all
                result = await episode.step("\\boxed{0}")
            return episode, result, trio.current_time()

    episode, result, now = run_with_mock_clock(body, episode_timeout_s=5.0, play_timeout_s=1e6)
    assert now >= 5 * MODEL_WAIT_S
    assert episode.failure is None and not result.terminated and episode.turns == 5
    assert episode.env_seconds < 5.0  # the calls themselves took no mock time


def test_a_stuck_play_is_ended_by_the_play_clock_and_counted_by_the_pool():
    async def body(pool, clock):
        with pytest.raises(EpisodeFailed, match=r"^timeout: the play took longer than 100 s") as caught:
            async with pool.open_episode(GUESS_SOURCE) as episode:
                await episode.reset(seed=0)
                clock.jump(101.0)
                await trio.sleep_forever()  # a reply that never comes
        assert episode.failure is caught.value
        return pool.statistics()

    stats = run_with_mock_clock(body, episode_timeout_s=5.0, play_timeout_s=100.0)
    assert stats.failures_by_kind == {"timeout": 1}


class SlowEnvironment:
    """Stands in for a sandbox worker (actors/sandbox/process.py WorkerProcess, as Episode drives it) whose every
    call takes `call_s` seconds of the environment's own time."""

    def __init__(self, call_s: float):
        self.call_s = call_s
        self.trusted = True
        self.request = None

    def start_request(self, message) -> None:
        self.request = message

    def reply_nowait(self, spin_ns: int):
        return None

    async def finish_request(self):
        await trio.sleep(self.call_s)
        if isinstance(self.request, protocol.Reset):
            return protocol.ResetDone(observation="start", info={})
        return protocol.StepDone(observation="ok", reward=0.0, terminated=False, truncated=False, info={})


def drive(call_s: float, steps: int, wait_s: float, **settings):
    """Reset and `steps` steps of an episode whose calls take `call_s` each, `wait_s` of model wait before each
    step, on an autojumping mock clock; the episode, the steps done and the failure (None if all ran)."""
    async def main():
        pool = SimpleNamespace(config=SandboxSettings(**{"step_timeout_s": 30.0, **settings}))
        episode = Episode(pool, SlowEnvironment(call_s), max_turns=None)
        done = 0
        try:
            await episode.reset(seed=0)
            for _ in range(steps):
                await trio.sleep(wait_s)
                await episode.step("x")
                done += 1
        except EpisodeFailed as failure:
            return episode, done, failure
        return episode, done, None

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_episode_clock_adds_up_the_calls_and_not_the_waits_between_them():
    episode, done, failure = drive(call_s=1.0, steps=8, wait_s=MODEL_WAIT_S, episode_timeout_s=10.0)
    assert (done, failure) == (8, None)
    assert episode.env_seconds == pytest.approx(9.0)  # the reset and 8 steps; 80 minutes of waits not counted


def test_an_environment_past_its_own_time_is_ended_and_stays_failed():
    # 3 s a call against 10 s: the reset and two steps use 9 s, the third step is cut at the 1 s left
    episode, done, failure = drive(call_s=3.0, steps=8, wait_s=0.0, episode_timeout_s=10.0)
    assert done == 2 and episode.env_seconds == pytest.approx(10.0)
    assert str(failure).startswith("timeout: the episode took longer than 10 s of the environment's own time")
    assert episode.failure is failure

    async def again():
        with pytest.raises(EpisodeFailed, match="the episode already failed: the episode took longer"):
            await episode.step("x")

    trio.run(again)


def test_a_slow_generator_does_not_end_a_play():
    """The agent's loop (actors/agent.py) against the real sandbox: every reply takes 10 minutes."""
    class SlowBatcher(FakeBatcher):
        async def generate(self, request):
            clock.jump(MODEL_WAIT_S)  # the reply takes 10 minutes
            return await super().generate(request)

    clock = trio.testing.MockClock(rate=0)
    task = PlayTask(task_id="t", env_id="e", skill="s", code=PICK, hint="", arm="no_hint", seed=1, step=3)

    async def main():
        async with open_sandbox_pool(workers=1, step_timeout_s=30.0, episode_timeout_s=5.0, play_timeout_s=1e6) as pool:
            return await play_game_episode(task, batcher=SlowBatcher(["a", "b", "c"]), pool=pool,
                                      tokenizer=FakeTokenizer(), play_config=PlayConfig(max_turns=3), worker_id="w")

    result = trio.run(main, clock=clock)
    assert (result.status, result.failure, len(result.turns)) == ("truncated", "", 3)  # every turn played: 30 minutes


def _failed_play(failure: str) -> PlayResult:
    return PlayResult(task_id=failure[:20], worker_id="w", env_id="e", arm="no_hint", seed=0, status="failed",
                      failure=failure, episode_return=0.0, turns=[], agent=make_sample("s", "agent", "e", "A", "no_hint", 0),
                      tokens_generated=0, seconds=1.0)


def test_plays_ended_by_a_clock_are_counted_in_the_step_metrics():
    """The words the sandbox uses (as actors/agent.py keeps them in `failure`) are the words the metrics count."""
    worded = [f"{f.kind}: {f.detail}" for f in (episode_clock_failure(300.0), play_clock_failure(3600.0))]
    plays = [_failed_play(w) for w in worded] + [_failed_play("timeout: the call took longer than 30 s"),
                                                 _failed_play("crashed: the worker died")]
    assert [ended_by_clock(p) for p in plays] == [True, True, False, False]
    assert [hung(p) for p in plays] == [False, False, True, False]  # a clock is not the environment hanging
    outcome = StepOutcome(step=1, plays=plays, results=plays, agent_samples=0, designer_samples=0, zero_variance_groups=0,
                          dropped_stale=0, envs_requested=0, envs_valid=0, tokens=0, seconds=1.0)
    row = step_metrics(outcome, k=4, env_slots=1, isolation="rlimits")
    assert (row["plays_failed"], row["plays_ended_by_clock"]) == (4, 2)
