"""The curriculum signals with known answers: Vendi, near-duplicates, granularity, validation, staleness, per-skill
win rates; and `curriculum_metrics` over a small store."""

from __future__ import annotations

import numpy as np
import pytest

from engine.curriculum import ActiveEnv
from engine.metrics.curriculum_signals import (
    curriculum_metrics,
    max_similarities,
    partial_levels,
    rejection_reason,
    reward_levels,
    reward_metrics,
    skill_win_rates,
    staleness,
    validation_metrics,
    vendi_score,
)
from engine.protocol.messages import PlayResult, Sample, TurnRecord, pack_floats, pack_ints, pack_mask
from engine.protocol.paths import RunPaths
from engine.curriculum import RefreshResult
from storage.records import EnvironmentRecord, MemoryRecord
from storage.store import Store


def test_vendi_of_n_identical_items_is_one():
    assert vendi_score(np.tile([[0.6, 0.8, 0.0]], (5, 1))) == pytest.approx(1.0)


def test_vendi_of_n_orthogonal_items_is_n():
    assert vendi_score(np.eye(7)) == pytest.approx(7.0)


def test_vendi_of_two_groups_of_identical_items_is_two():
    x = np.array([[1.0, 0.0]] * 3 + [[0.0, 1.0]] * 3)
    assert vendi_score(x) == pytest.approx(2.0)


def test_vendi_of_nothing_is_zero():
    assert vendi_score(np.zeros((0, 4))) == 0.0


def test_vendi_ignores_the_vectors_lengths():
    assert vendi_score(np.array([[2.0, 0.0], [0.0, 0.5]])) == pytest.approx(2.0)


def test_max_similarities_to_a_reference():
    new = np.array([[1.0, 0.0], [0.0, 1.0]])
    reference = np.array([[1.0, 0.0], [0.6, 0.8]])
    assert max_similarities(new, reference) == pytest.approx([1.0, 0.8])
    assert max_similarities(new, reference[:0]) == [0.0, 0.0]


def test_granularity_of_a_known_reward_set():
    rewards = [0.0, 0.25, 0.25, 0.5, 1.0, 1.0, 0.5000000001]
    assert reward_levels(rewards) == 4  # 0, 0.25, 0.5, 1 (equal to 1e-6)
    assert partial_levels(rewards) == 2  # 0.25 and 0.5
    assert reward_levels([]) == 0 and partial_levels([0.0, 1.0, -1.0]) == 0


def _sample(sample_id: str, versions: list[int]) -> Sample:
    n = len(versions) + 2
    return Sample(
        sample_id=sample_id, role="agent", env_id="e", skill="s", arm="no_hint", step=0, tokens=pack_ints(range(n)),
        loss_mask=pack_mask([0, 0] + [1] * len(versions)), logprobs=pack_floats([0.0] * n), versions=pack_ints([-1, -1] + versions), reward=0.0,
    )


def _play(env_id: str, arm: str, rewards: list[float], ret: float, versions=(0,), status="completed") -> PlayResult:
    turns = [TurnRecord(action="a", parse_rule="boxed_last", reward=r, terminated=False, truncated=False, policy_version=0, observation_chars=3) for r in rewards]
    return PlayResult(
        task_id=f"{env_id}-{arm}-{ret}", worker_id="w", env_id=env_id, arm=arm, seed=0, status=status, failure="", episode_return=ret,
        turns=turns, agent=_sample(f"{env_id}-{arm}", list(versions)), tokens_generated=10, seconds=1.0,
    )


def test_reward_metrics_per_environment():
    plays = [_play("a", "no_hint", [0.0, 0.5, 1.0], 1.0), _play("a", "no_hint", [0.25], 0.25), _play("b", "no_hint", [0.0], 0.0),
             _play("b", "hint", [1.0], 1.0, status="failed")]
    m = reward_metrics(plays)
    assert m["reward_levels"] == pytest.approx((4 + 1) / 2)  # a: 0, 0.25, 0.5, 1; b: 0 (its failed play left out)
    assert m["partial_reward_levels"] == pytest.approx((2 + 0) / 2)
    assert m["partial_reward_turns"] == 2


def test_win_rates_by_skill_and_staleness():
    plays = [_play("a", "no_hint", [1.0], 1.0, versions=(3, 4)), _play("a", "no_hint", [0.0], 0.0, versions=(4,)), _play("b", "no_hint", [1.0], 1.0, versions=(2,)),
             _play("b", "hint", [0.0], 0.0, versions=(4,))]
    assert skill_win_rates(plays, {"a": "Logic", "b": "Math"}) == {"Logic": 0.5, "Math": 1.0}
    assert staleness(plays, trained_at=4) == {"sample_staleness_mean": pytest.approx((1 + 0 + 2 + 0) / 4), "sample_staleness_max": 2}


def _env(env_id: str, step: int, valid: bool, reason: str = "", code: str = "class A:\n    pass\n", hint: str = "") -> EnvironmentRecord:
    return EnvironmentRecord(
        env_id=env_id, skill="Logic", step_created=step, source="designed", passage_id="", attempt=1, code=code, reply="", hint=hint,
        valid=valid, reason=reason, checks=[], designer_sample_id=env_id, worker_id="w", created_at=0.0,
    )


def test_validation_pass_rate_and_rejection_reasons():
    designs = [_env("a", 0, True), _env("b", 0, False, "single_env_class: two classes"), _env("c", 0, False, "single_env_class: none"),
               _env("d", 0, False, "worker error: the worker died")]
    assert validation_metrics(designs) == {"designs": 4, "validation_pass_rate": 0.25, "rejection_reasons": {"single_env_class": 2, "worker error": 1}}
    assert validation_metrics([])["validation_pass_rate"] is None
    assert rejection_reason("parses: SyntaxError") == "parses"


def test_curriculum_metrics_over_a_store(tmp_path, monkeypatch):
    import engine.metrics.curriculum_signals as cm
    from engine.metrics.embeddings import NgramEmbedder

    monkeypatch.setattr(cm, "open_embedder", lambda: NgramEmbedder())  # fast and installed everywhere
    paths = RunPaths(tmp_path)
    paths.update_meta(model_path=str(tmp_path / "no-model"))
    store = Store.open(paths.store)
    answer_code = "class PickEnv:\n    def reset(self, seed=None):\n        return 'The answer is 42. Reply with it.', {}\n    def solution(self):\n        return ['42']\n"
    other = "class MazeEnv:\n    def reset(self, seed=None):\n        return 'Find the exit of the maze.', {}\n"
    with store.batch() as batch:
        batch.put_environment(_env("new", 2, True, code=answer_code, hint="say the number"))
        batch.put_environment(_env("bad", 2, False, "parses: SyntaxError"))
        batch.put_memory(MemoryRecord(env_id="old", skill="Logic", name="PickEnv", code=answer_code, win_rate=0.5, regret=0.1, step=0, source="designed"))
        batch.put_memory(MemoryRecord(env_id="new", skill="Logic", name="PickEnv", code=answer_code, win_rate=0.5, regret=0.1, step=2, source="designed"))
    active = [ActiveEnv(env_id="new", skill="Logic", code=answer_code, hint="say the number", designed_now=True, class_name="PickEnv"),
              ActiveEnv(env_id="seed", skill="Math", code=other, hint="", designed_now=False, class_name="MazeEnv")]
    plays = [_play("new", "no_hint", [1.0], 1.0, versions=(2,)), _play("seed", "no_hint", [0.0, 0.5], 0.0, versions=(1,))]
    m = curriculum_metrics(store, paths, 2, RefreshResult(active=active, requested=2, valid=1, tokens=30), plays, trained_at=2, seconds=2.0)
    store.close()
    assert m["designs"] == 2 and m["validation_pass_rate"] == 0.5 and m["rejection_reasons"] == {"parses": 1}
    assert m["embedding"] == "char-ngram-tf"
    assert 1.0 < m["vendi_envs"] <= 2.0 and m["vendi_memory"] == pytest.approx(1.0)  # two copies of one code
    assert m["near_duplicates"] == 1 and m["max_memory_similarity"] == pytest.approx(1.0)  # "new" repeats "old"
    assert m["formula_reveal_rate"] == 1.0 and m["formula_reveals"] == 1  # no tokenizer: reset()'s literal states 42
    assert m["win_rate_by_skill"] == {"Logic": 1.0, "Math": 0.0}
    assert m["sample_staleness_mean"] == 0.5 and m["sample_staleness_max"] == 1
    assert m["tokens_agent"] == 20 and m["tokens_per_s_agent"] == 10.0 and m["tokens_per_s_designer"] == 15.0
    assert m["partial_reward_turns"] == 1
