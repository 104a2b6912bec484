"""The engine's checks of what a worker hands it (engine/peers/result_checks.py, engine.protocol.sample_values.sample_problem)."""

import collections
import math
import random

import msgspec
import pytest

from engine.peers.dispatch import WorkerState
from engine.protocol.messages import (
    PlayResult,
    PlayTask,
    TaskFailed,
    TurnRecord,
    ValidateResult,
    ValidateTask,
)
from engine.protocol.model_config import read_vocab_size
from engine.protocol.sample_values import LOGPROB_TOLERANCE, sample_problem, values_pass
from engine.peers.result_checks import ResultGate, result_problem
from tests.engine.builders import DESIGN_TASK, checked_design as _design, checked_sample as _sample

VOCAB = 100
NEWEST = 3
PLAY_TASK = PlayTask(task_id="s0000-e-no_hint-00", env_id="e", skill="k", code="", hint="", arm="no_hint", seed=7, step=0)


def _play(episode_return=1.0, sample=None, turns=None, **extra) -> PlayResult:
    fields = dict(
        task_id=PLAY_TASK.task_id, worker_id="w", env_id="e", arm="no_hint", seed=7, status="completed", failure="",
        episode_return=episode_return, agent=sample or _sample(reward=episode_return if math.isfinite(episode_return) else 0.0),
        turns=turns if turns is not None else [TurnRecord(action="1", parse_rule="boxed", reward=1.0, terminated=True, truncated=False, policy_version=3, observation_chars=4)],
        tokens_generated=3, seconds=0.5,
    )
    return PlayResult(**(fields | extra))


def _problem(result, task=PLAY_TASK):
    return result_problem(result, task, vocab_size=VOCAB, newest_version=NEWEST)


def test_a_good_play_and_a_good_design_pass():
    assert _problem(_play()) is None
    assert _problem(_design(), DESIGN_TASK) is None
    assert _problem(_play(episode_return=-1.0)) is None


@pytest.mark.parametrize("draws", [0, -1, 17])
def test_a_designs_draws_must_be_within_the_cap(draws):
    assert _problem(_design(draws=draws), DESIGN_TASK) == f"its draws {draws} is not in [1, 16]"
    assert _problem(_design(draws=16), DESIGN_TASK) is None


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0])
def test_the_step_accounts_timing_figures_must_be_finite_and_not_negative(value):
    assert "its policy_wait_s" in _problem(_play(policy_wait_s=value))
    assert "its validate_s" in _problem(_design(validate_s=value), DESIGN_TASK)
    assert "its hint_s" in _problem(_design(hint_s=value), DESIGN_TASK)


def test_a_designs_validation_and_hint_time_fit_in_its_seconds():
    seconds = _design().seconds
    assert _problem(_design(validate_s=seconds / 2, hint_s=seconds / 4, policy_wait_s=99.0), DESIGN_TASK) is None
    assert "exceed its seconds" in _problem(_design(validate_s=seconds, hint_s=seconds), DESIGN_TASK)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1.5, -1.01])
def test_an_episode_return_must_be_finite_and_within_one(value):
    assert "episode return" in _problem(_play(episode_return=value, sample=_sample(reward=0.0)))
    assert "episode return" in _problem(_play(episode_return=value, sample=_sample(reward=0.0)), None)  # even not leased


def test_the_sample_reward_and_turn_rewards_must_be_finite():
    assert "reward" in _problem(_play(sample=_sample(reward=math.nan)))
    bad_turn = TurnRecord(action="1", parse_rule="boxed", reward=math.nan, terminated=True, truncated=False, policy_version=3, observation_chars=4)
    assert "turn reward" in _problem(_play(turns=[bad_turn]))
    future_turn = msgspec.structs.replace(bad_turn, reward=0.0, policy_version=NEWEST + 1)
    assert "policy version" in _problem(_play(turns=[future_turn]))


def _plain_verdict(tokens, mask, logprobs, versions, vocab_size, max_version) -> str | None:
    """The value checks written the plain way (index arrays, one check at a time), to hold the fast ones to."""
    if tokens and (min(tokens) < 0 or max(tokens) >= vocab_size):
        return "vocabulary"
    if tokens and max(mask) > 1:
        return "loss mask"
    if not all(math.isfinite(x) for x in logprobs):
        return "not finite"
    if any(x > LOGPROB_TOLERANCE for x, m in zip(logprobs, mask) if m == 1):
        return "> 0"
    if tokens and (min(versions) < -1 or max(versions) > max_version):
        return "policy versions"
    if any(v < 0 for v, m in zip(versions, mask) if m == 1):
        return "loss-mask tokens"
    return None


def test_the_fast_value_checks_agree_with_plain_ones_on_random_samples():
    """sample_problem and the unversioned check use whole-array reductions (unsigned ids, masked products); on 3,000
    random samples full of edge values (negative and huge ids, infinities on unmasked tokens, -1 versions on
    trained tokens) they refuse exactly what the plain checks refuse, for the same reason."""
    rng = random.Random(11)
    edge_ids = [-(1 << 31), -1, 0, VOCAB - 1, VOCAB, (1 << 31) - 1]
    edge_logprobs = [0.0, -0.0, 1e-5, 2e-4, 0.5, -1e30, -math.inf, math.inf, math.nan]
    refused = collections.Counter()
    for _ in range(3000):
        n = rng.randrange(0, 6)
        tokens = [rng.choice(edge_ids) if rng.random() < 0.05 else rng.randrange(VOCAB) for _ in range(n)]
        mask = [rng.choice((0, 1, 2)) if rng.random() < 0.03 else rng.randrange(2) for _ in range(n)]
        logprobs = [rng.choice(edge_logprobs) if rng.random() < 0.1 else -rng.random() * 5 for _ in range(n)]
        versions = [rng.choice((-3, -2, -1, NEWEST + 1)) if rng.random() < 0.08 else rng.randrange(NEWEST + 1) for _ in range(n)]
        sample = _sample(tokens=tokens, mask=mask, logprobs=logprobs, versions=versions)
        expected = _plain_verdict(tokens, mask, logprobs, versions, VOCAB, NEWEST)
        problem = result_problem(_play(sample=sample), None, vocab_size=VOCAB, newest_version=NEWEST)
        assert (problem is None) == (expected is None), (tokens, mask, logprobs, versions, problem)
        assert expected is None or expected in problem, (tokens, mask, logprobs, versions, problem)
        refused[expected] += 1
    assert all(refused[reason] >= 20 for reason in ("vocabulary", "loss mask", "not finite", "> 0", "policy versions", "loss-mask tokens"))
    assert refused[None] >= 500


def _random_sample(rng: random.Random):
    """A sample of 0-5 tokens, now and then with an edge value in one of its arrays or scalars (or arrays that do
    not line up), and its plain verdict."""
    n = rng.randrange(0, 6)
    tokens = [rng.choice([-(1 << 31), -1, VOCAB, (1 << 31) - 1]) if rng.random() < 0.01 else rng.randrange(VOCAB) for _ in range(n)]
    mask = [2 if rng.random() < 0.01 else rng.randrange(2) for _ in range(n)]
    logprobs = [rng.choice([2e-4, 0.5, -math.inf, math.inf, math.nan]) if rng.random() < 0.02 else -rng.random() * 5 for _ in range(n)]
    versions = [rng.choice((-2, -1, NEWEST + 1, (1 << 31) - 1)) if rng.random() < 0.02 else rng.randrange(NEWEST + 1) for _ in range(n)]
    expected = _plain_verdict(tokens, mask, logprobs, versions, VOCAB, NEWEST)
    extra = {}
    if rng.random() < 0.02:
        extra[rng.choice(("reward", "advantage", "temperature"))] = rng.choice((math.nan, math.inf))
        expected = expected or "scalar"
    if n and rng.random() < 0.02:
        logprobs, expected = logprobs[:-1], expected or "length"
    return _sample(tokens=tokens, mask=mask, logprobs=logprobs, versions=versions, **extra), expected


def test_the_joined_value_check_passes_a_batch_exactly_when_each_sample_passes():
    """values_pass joins a receive's samples and checks them in one pass (engine/peers/hub.py); on 3,000 random
    batches of 1-8 samples it passes exactly those in which every sample passes the plain checks, so a batch with
    one bad sample goes back to the one-by-one checks, which name it."""
    rng = random.Random(12)
    verdicts = collections.Counter()
    for _ in range(3000):
        batch = [_random_sample(rng) for _ in range(rng.randrange(1, 9))]
        every_one_passes = all(expected is None for _, expected in batch)
        assert values_pass([s for s, _ in batch], vocab_size=VOCAB, max_version=NEWEST, versioned=True) == every_one_passes, batch
        verdicts[every_one_passes] += 1
    assert verdicts[True] >= 300 and verdicts[False] >= 300
    # without `versioned`, a trained token stamped -1 is not its business (sample_problem does not ask it either)
    unversioned = _sample(tokens=(1, 2), mask=(0, 1), logprobs=(0.0, -1.0), versions=(-1, -1))
    assert values_pass([unversioned], vocab_size=VOCAB, max_version=NEWEST) and sample_problem(unversioned, vocab_size=VOCAB, max_version=NEWEST) is None
    assert not values_pass([unversioned], vocab_size=VOCAB, max_version=NEWEST, versioned=True)
    assert values_pass([_sample(tokens=(), mask=(), logprobs=(), versions=())], vocab_size=VOCAB, max_version=NEWEST, versioned=True)


def test_a_result_whose_values_passed_with_its_batch_is_still_held_to_its_task():
    """values_checked skips only the value checks: the answer must still be its task's."""
    gate = ResultGate(vocab_size=VOCAB, max_rejected=0, emit=lambda line: None)
    result = _play()
    assert gate.values_pass([result], NEWEST)
    assert result_problem(msgspec.structs.replace(result, seed=8), PLAY_TASK, vocab_size=VOCAB, newest_version=NEWEST, values_checked=True) \
        == "its seed '8' is not the task's '7'"
    assert not gate.values_pass([], NEWEST)


@pytest.mark.parametrize(
    "fields, words",
    [
        (dict(tokens=(5, 6, 7, VOCAB)), "outside the model's vocabulary"),
        (dict(tokens=(5, -1, 7, 8)), "outside the model's vocabulary"),
        (dict(mask=(0, 1, 2, 1)), "loss mask"),
        (dict(logprobs=(0.0, -1.0, math.nan, -0.5)), "log-prob is not finite"),
        (dict(logprobs=(0.0, -1.0, 0.5, -0.5)), "> 0"),
        (dict(versions=(-2, 3, 3, 3)), "policy versions"),
        (dict(versions=(-1, 3, NEWEST + 1, 3)), "policy versions"),
        (dict(advantage=math.inf), "advantage"),
        (dict(temperature=math.nan), "temperature"),
        (dict(logprobs=(0.0, -1.0, -2.0)), "entries for 4 tokens"),
    ],
)
def test_sample_values_are_checked(fields, words):
    assert words in _problem(_play(sample=_sample(**fields)))


def test_a_trained_token_without_a_policy_version_is_refused():
    """The issue's reproduction: versions [-1, -1, -1, -1] with mask [0, 1, 1, 1] passed the gate before."""
    unversioned = _sample(versions=(-1, -1, -1, -1), mask=(0, 1, 1, 1))
    assert "3 of its 3 loss-mask tokens carry policy version -1" in _problem(_play(sample=unversioned))
    assert "loss-mask tokens" in _problem(_play(sample=unversioned), None)  # even not leased
    one = _sample(versions=(-1, 3, -1, 3))
    assert "1 of its 3 loss-mask tokens" in _problem(_play(sample=one))
    design = _sample(sample_id=DESIGN_TASK.task_id, role="designer", arm="design", env_id=DESIGN_TASK.task_id, reward=0.0, versions=(-1, 3, 3, -1))
    assert "loss-mask tokens" in _problem(_design(sample=design), DESIGN_TASK)
    assert _problem(_play(sample=_sample(versions=(-1, 3, 3, 3), mask=(0, 1, 1, 1)))) is None  # a prompt token may carry -1
    assert _problem(_play(sample=_sample(versions=(-1, -1, 3, 3), mask=(0, 0, 1, 1)))) is None


def test_a_tiny_positive_logprob_from_rounding_passes_and_unmasked_values_are_free():
    assert sample_problem(_sample(logprobs=(5.0, 1e-6, -2.0, -0.5)), vocab_size=VOCAB) is None  # position 0 is not sampled


@pytest.mark.parametrize(
    "result",
    [
        _play(env_id="other"),
        _play(arm="hint"),
        _play(seed=8),
        _play(sample=_sample(sample_id="s0000-x-no_hint-00")),  # would overwrite another trajectory in the store
        _play(sample=_sample(role="designer")),
        _play(sample=_sample(step=1)),
        _play(sample=_sample(env_id="other")),
    ],
)
def test_a_play_must_answer_its_task(result):
    assert "not the task's" in _problem(result)


def test_a_result_must_be_of_its_tasks_kind():
    assert "not a play" in _problem(_play(), DESIGN_TASK)
    assert "not a design" in _problem(_design(), PLAY_TASK)
    assert "not the task's" in _problem(_design(attempt=2), DESIGN_TASK)
    validate = ValidateTask(task_id="v", env_id="e1", skill="k", code="", hint="", author="w", step=0)
    answer = ValidateResult(task_id="v", worker_id="w2", env_id="e1", valid=True, reason="", checks=[], sandbox="other_worker", seconds=0.1)
    assert _problem(answer, validate) is None
    assert "not the task's" in _problem(msgspec.structs.replace(answer, env_id="e2"), validate)
    assert "not a validation" in _problem(answer, PLAY_TASK)


class _Dispatcher:
    def __init__(self, ident, tasks):
        self.workers = {ident: WorkerState(ident=ident, worker_id="w", slots=4, isolation="", backend="", policy_version=0, last_seen=0.0,
                                           in_flight={t.task_id: t for t in tasks})}


def test_the_gate_turns_a_rejected_result_into_a_failed_task_logs_a_few_lines_and_drops_the_worker():
    lines = []
    gate = ResultGate(vocab_size=VOCAB, max_rejected=3, emit=lines.append)
    dispatcher = _Dispatcher(b"peer", [PLAY_TASK])
    good, drop = gate.screen(b"peer", _play(), dispatcher, NEWEST)
    assert isinstance(good, PlayResult) and not drop
    verdicts = [gate.screen(b"peer", _play(episode_return=math.nan, sample=_sample(reward=0.0)), dispatcher, NEWEST) for _ in range(5)]
    assert all(isinstance(m, TaskFailed) and m.reason.startswith("rejected result: its episode return nan") for m, _ in verdicts)
    assert [drop for _, drop in verdicts] == [False, False, True, True, True]  # dropped at the third, and again after
    assert gate.counters == {"refused_results": 5, "dropped_workers": 3}
    rejections = [line for line in lines if "rejected the result" in line]
    assert len(rejections) == 3  # rate-limited: a few lines a minute per worker
    assert any("dropped worker w" in line for line in lines)


def test_the_gate_cuts_peer_chosen_ids_in_its_lines():
    lines = []
    gate = ResultGate(vocab_size=VOCAB, max_rejected=0, emit=lines.append)
    task = msgspec.structs.replace(PLAY_TASK, task_id="t" * 5000)
    result = _play(task_id=task.task_id, worker_id="w" * 128, sample=_sample(sample_id=task.task_id, tokens=(1, 2, 3, 10**6)))
    message, drop = gate.screen(b"peer", result, _Dispatcher(b"peer", [task]), NEWEST)
    assert isinstance(message, TaskFailed) and not drop  # max_rejected 0: never dropped
    assert len(lines) == 1 and len(lines[0]) < 400 and len(message.reason) <= 300


def test_the_vocab_size_is_read_from_the_model_folder_without_torch(tmp_path, tiny_model_path):
    assert read_vocab_size(tiny_model_path) == 4096
    (tmp_path / "config.json").write_text('{"model_type": "x", "text_config": {"vocab_size": 77}}')
    assert read_vocab_size(tmp_path) == 77
    assert read_vocab_size(tmp_path / "missing") is None


def test_a_result_must_name_the_worker_its_sender_joined_as():
    gate = ResultGate(vocab_size=VOCAB, max_rejected=3, emit=lambda line: None)
    message, _ = gate.screen(b"peer", _play(worker_id="someone-else"), _Dispatcher(b"peer", [PLAY_TASK]), NEWEST)
    assert isinstance(message, TaskFailed) and "joined as" in message.reason
