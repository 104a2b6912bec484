"""The designer's memory: positive and negative examples per skill, the learnable band and the pool ranked by regret."""

import random

import pytest

from engine.protocol.messages import MemoryExample
from storage.memory import evicted, negative_lines, positive_examples
from storage.records import MemoryRecord


def _record(env_id, win_rate=0.5, regret=0.0, *, skill="S", step=0, source="designed", code=None):
    return MemoryRecord(
        env_id=env_id, skill=skill, name=f"{env_id}Env", code=code if code is not None else f"class {env_id}Env: pass",
        win_rate=win_rate, regret=regret, step=step, source=source,
    )


class RecordingRandom(random.Random):
    """A seeded Random that remembers what each `sample` call was asked to draw from."""

    def __init__(self, seed=0):
        super().__init__(seed)
        self.draws = []

    def sample(self, population, k, **kwargs):
        self.draws.append((list(population), k))
        return super().sample(population, k, **kwargs)


def _names(examples):
    return sorted(e.name for e in examples)


# ---------------------------------------------------------------- positives


def test_positives_come_only_from_the_requested_skill():
    records = [_record(f"s{i}", skill="S", regret=i) for i in range(4)] + [_record(f"t{i}", skill="T", regret=10 + i) for i in range(4)]
    assert _names(positive_examples(records, "S", 10, random.Random(0), 100)) == ["s0Env", "s1Env", "s2Env", "s3Env"]
    assert _names(positive_examples(records, "T", 10, random.Random(0), 100)) == ["t0Env", "t1Env", "t2Env", "t3Env"]
    assert positive_examples(records, "U", 10, random.Random(0), 100) == []


def test_the_learnable_band_is_0_15_to_0_85_inclusive():
    # spade-reference.md section 7: win_rate in [0.15, 0.85]
    rates = {"below": 0.1499, "low_edge": 0.15, "mid": 0.5, "high_edge": 0.85, "above": 0.8501, "zero": 0.0, "one": 1.0}
    records = [_record(name, rate) for name, rate in rates.items()]
    assert _names(positive_examples(records, "S", 10, random.Random(0), 100)) == ["high_edgeEnv", "low_edgeEnv", "midEnv"]


def test_a_win_rate_that_is_a_fraction_of_plays_lands_on_the_band_edges():
    # win rates are fractions of G plays: 3/20 and 17/20 must count as learnable
    records = [_record("low", 3 / 20), _record("high", 17 / 20)]
    assert _names(positive_examples(records, "S", 2, random.Random(0), 100)) == ["highEnv", "lowEnv"]


@pytest.mark.parametrize("n, pool_size", [(1, 10), (2, 10), (3, 10), (4, 12), (5, 15)])
def test_the_pool_is_the_top_max_3n_10_by_regret(n, pool_size):
    records = [_record(f"e{i:02d}", 0.5, regret=i / 10) for i in range(20)]
    random.Random(1).shuffle(records)
    rng = RecordingRandom(0)
    chosen = positive_examples(records, "S", n, rng, 100)
    [(pool, k)] = rng.draws
    assert k == n
    assert [r.env_id for r in pool] == [f"e{i:02d}" for i in range(19, 19 - pool_size, -1)]  # regret descending
    assert len(chosen) == n and len({e.name for e in chosen}) == n
    assert {e.name for e in chosen} <= {r.name for r in pool}


def test_the_pool_ranks_regret_not_win_rate_and_skips_unlearnable_high_regret():
    records = [_record(f"l{i:02d}", 0.5, regret=i) for i in range(12)]
    records += [_record("too_easy", 0.95, regret=100.0), _record("other_skill", 0.5, regret=100.0, skill="T")]
    rng = RecordingRandom(0)
    positive_examples(records, "S", 1, rng, 100)
    [(pool, _)] = rng.draws
    assert [r.env_id for r in pool] == [f"l{i:02d}" for i in range(11, 1, -1)]


def test_the_pool_uses_negative_regret_records_last():
    records = [_record("neg", 0.5, regret=-0.5), _record("zero", 0.5, regret=0.0), _record("pos", 0.5, regret=0.5)]
    rng = RecordingRandom(0)
    positive_examples(records, "S", 1, rng, 100)
    assert [r.env_id for r in rng.draws[0][0]] == ["pos", "zero", "neg"]


def test_random_draws_from_the_pool_reach_all_of_it_and_nothing_else():
    records = [_record(f"e{i:02d}", 0.5, regret=i) for i in range(30)]
    seen = set()
    for seed in range(300):
        seen.update(e.name for e in positive_examples(records, "S", 1, random.Random(seed), 100))
    assert seen == {f"e{i:02d}Env" for i in range(20, 30)}


def test_positives_are_deterministic_for_a_seed_whatever_the_record_order():
    records = [_record(f"e{i:02d}", 0.5, regret=i % 4) for i in range(16)]  # ties in regret
    shuffled = list(records)
    random.Random(5).shuffle(shuffled)
    assert positive_examples(records, "S", 3, random.Random(9), 100) == positive_examples(shuffled, "S", 3, random.Random(9), 100)


def test_fewer_learnable_records_than_asked_returns_them_all():
    records = [_record("a", 0.5, 1.0), _record("b", 0.3, 0.5), _record("c", 0.99, 2.0)]
    assert _names(positive_examples(records, "S", 5, random.Random(0), 100)) == ["aEnv", "bEnv"]
    assert positive_examples([], "S", 2, random.Random(0), 100) == []
    assert positive_examples(records, "S", 0, random.Random(0), 100) == []


def test_a_positive_example_carries_the_record_with_its_code_truncated():
    code = "class LongEnv:\n" + "    x = 1\n" * 50
    [example] = positive_examples([_record("Long", 0.4, 0.25, code=code)], "S", 1, random.Random(0), 20)
    assert example == MemoryExample(skill="S", win_rate=0.4, regret=0.25, code=code[:20], name="LongEnv", env_id="Long")
    assert len(example.code) == 20
    [short] = positive_examples([_record("Short", 0.4, 0.25, code="class ShortEnv: pass")], "S", 1, random.Random(0), 2000)
    assert short.code == "class ShortEnv: pass"
    [empty] = positive_examples([_record("Zero", 0.4, 0.25)], "S", 1, random.Random(0), 0)
    assert empty.code == ""


# ---------------------------------------------------------------- negatives


def test_negatives_come_only_from_the_requested_skill():
    records = [_record("s_easy", 0.95, skill="S"), _record("t_easy", 0.95, skill="T"), _record("t_hard", 0.0, skill="T")]
    assert negative_lines(records, "S", 5, random.Random(0)) == ["too easy (win_rate=0.95): class s_easyEnv"]
    assert negative_lines(records, "U", 5, random.Random(0)) == []


def test_negative_thresholds_are_strict():
    # spade-reference.md section 7: win_rate > 0.9 or < 0.1
    rates = {"zero": 0.0, "hard": 0.0999, "hard_edge": 0.1, "gap_low": 0.12, "mid": 0.5, "gap_high": 0.88, "easy_edge": 0.9, "easy": 0.9001, "one": 1.0}
    records = [_record(name, rate) for name, rate in rates.items()]
    lines = negative_lines(records, "S", 20, random.Random(0))
    assert sorted(line.rsplit(" ", 1)[1] for line in lines) == ["easyEnv", "hardEnv", "oneEnv", "zeroEnv"]


def test_records_between_the_bands_are_neither_positive_nor_negative():
    records = [_record("gap_low", 0.12), _record("gap_high", 0.88), _record("hard_edge", 0.1), _record("easy_edge", 0.9)]
    assert positive_examples(records, "S", 10, random.Random(0), 100) == []
    assert negative_lines(records, "S", 10, random.Random(0)) == []


def test_negative_line_format():
    records = [_record("Foo", 0.95), _record("Bar", 0.05), _record("Full", 1.0), _record("Never", 0.0)]
    assert sorted(negative_lines(records, "S", 4, random.Random(0))) == [
        "too easy (win_rate=0.95): class FooEnv",
        "too easy (win_rate=1.00): class FullEnv",
        "too hard (win_rate=0.00): class NeverEnv",
        "too hard (win_rate=0.05): class BarEnv",
    ]


def test_negatives_are_n_random_distinct_records_of_all_the_bad_ones():
    records = [_record(f"e{i:02d}", 0.95 if i % 2 else 0.05, regret=i) for i in range(12)]
    rng = RecordingRandom(3)
    lines = negative_lines(records, "S", 2, rng)
    [(population, k)] = rng.draws
    assert k == 2 and len(population) == 12  # no regret pool: every bad record can be drawn
    assert len(lines) == 2 and len(set(lines)) == 2
    seen = set()
    for seed in range(300):
        seen.update(negative_lines(records, "S", 1, random.Random(seed)))
    assert len(seen) == 12


def test_negatives_are_deterministic_for_a_seed_whatever_the_record_order():
    records = [_record(f"e{i:02d}", 1.0) for i in range(8)]
    shuffled = list(records)
    random.Random(2).shuffle(shuffled)
    assert negative_lines(records, "S", 3, random.Random(4)) == negative_lines(shuffled, "S", 3, random.Random(4))


def test_fewer_bad_records_than_asked_returns_them_all():
    assert len(negative_lines([_record("a", 1.0), _record("b", 0.5)], "S", 3, random.Random(0))) == 1
    assert negative_lines([], "S", 1, random.Random(0)) == []
    assert negative_lines([_record("a", 1.0)], "S", 0, random.Random(0)) == []


# ---------------------------------------------------------------- eviction


def test_nothing_is_evicted_within_capacity():
    records = [_record(str(i), step=i) for i in range(4)]
    assert evicted(records, 5) == []
    assert evicted(records, 4) == []
    assert evicted([], 0) == []


def test_the_oldest_designed_records_go_first_whatever_the_order():
    records = [_record(f"d{i}", step=i) for i in range(6)]
    random.Random(0).shuffle(records)
    assert evicted(records, 4) == ["d0", "d1"]
    assert evicted(records, 1) == ["d0", "d1", "d2", "d3", "d4"]
    assert evicted(records, 0) == ["d0", "d1", "d2", "d3", "d4", "d5"]


def test_records_of_the_same_step_are_evicted_in_env_id_order():
    records = [_record("b", step=1), _record("a", step=1), _record("c", step=0), _record("z", step=2)]
    assert evicted(records, 1) == ["c", "a", "b"]


def test_seeds_are_never_evicted_even_when_oldest():
    seeds = [_record(f"seed{i}", source="seed", step=-1) for i in range(3)]
    designed = [_record(f"d{i}", step=i) for i in range(4)]
    records = seeds + designed
    assert evicted(records, 5) == ["d0", "d1"]  # seeds count towards capacity, designed records make room
    assert evicted(records, 3) == ["d0", "d1", "d2", "d3"]


def test_when_seeds_alone_exceed_capacity_only_designed_records_are_evicted():
    seeds = [_record(f"seed{i}", source="seed", step=i) for i in range(5)]
    designed = [_record("d", step=10)]
    assert evicted(seeds + designed, 2) == ["d"]
    assert evicted(seeds, 2) == []


def test_eviction_keeps_the_newest_designed_records():
    records = [_record(f"d{i:03d}", step=i) for i in range(250)] + [_record("seed", source="seed", step=0)]
    dropped = set(evicted(records, 200))
    kept = [r for r in records if r.env_id not in dropped]
    assert len(kept) == 200
    assert "seed" in {r.env_id for r in kept}
    assert min(r.step for r in kept if r.source == "designed") == 51
