"""The easy and medium seed games (engine/protocol/data/seeds, the games the learning probe plays) print a format
example (`Answer as \\boxed{e}`). A small model copies it, so the example must be drawn independently of the answer:
then copying it wins exactly at chance. Checked over many seeds for each game with a chi-square test of
independence between the answer and the example (the seeds' code runs in-process here: it is this repository's
data). Each game's `answer` and `example` below read the game's own state (the test's knowledge, not the engine's)."""

import random
import re

import pytest

from tests.seed_helpers import probe_seed_files, seed_env_class

SEEDS = 4000
BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def _first_example(observation: str) -> str:
    return BOXED.findall(observation)[0]


def _direction(p: int, g: int, width: int) -> str:
    """The first move a shortest path takes (rows before columns)."""
    (pr, pc), (gr, gc) = divmod(p, width), divmod(g, width)
    if pr != gr:
        return "down" if gr > pr else "up"
    return "right" if gc > pc else "left"


# file -> (answer, example): discrete keys read from a freshly reset game and its first observation.
KEYS = {
    "mathematical_reasoning_easy.py": lambda env, obs: (env.opts.index(env.a + env.b), env.opts.index(int(_first_example(obs)))),
    "mathematical_reasoning_medium.py": lambda env, obs: (env.x, int(_first_example(obs))),
    "logical_deduction_easy.py": lambda env, obs: (env.names.index(env.ans), env.names.index(_first_example(obs))),
    "logical_deduction_medium.py": lambda env, obs: (env.names.index(env.ans), env.names.index(_first_example(obs))),
    "optimization_easy.py": lambda env, obs: (sorted(env.v).index(env.best), sorted(env.v).index(_first_example(obs))),
    "optimization_medium.py": lambda env, obs: (min(env.ok), _first_example(obs)),
    "pattern_recognition_easy.py": lambda env, obs: (env.ans, _first_example(obs)),
    "pattern_recognition_medium.py": lambda env, obs: (env.opts.index(env.ans), env.opts.index(int(_first_example(obs)))),
    "spatial_reasoning_easy.py": lambda env, obs: ("right" if env.g > env.p else "left", _first_example(obs)),
    "spatial_reasoning_medium.py": lambda env, obs: (_direction(env.p, env.g, 3), _first_example(obs)),
    "causal_inference_easy.py": lambda env, obs: (env.w, " ".join(BOXED.findall(obs))),
    "causal_inference_medium.py": lambda env, obs: (env.w, " ".join(BOXED.findall(obs))),
}


def chi_square_dependent(pairs: list[tuple]) -> tuple[float, int]:
    """Pearson's chi-square statistic of the answer x example contingency table, and its degrees of freedom."""
    rows, cols = sorted({a for a, _ in pairs}, key=str), sorted({b for _, b in pairs}, key=str)
    counts = {}
    for pair in pairs:
        counts[pair] = counts.get(pair, 0) + 1
    n = len(pairs)
    row_sums = {a: sum(counts.get((a, b), 0) for b in cols) for a in rows}
    col_sums = {b: sum(counts.get((a, b), 0) for a in rows) for b in cols}
    chi2 = sum((counts.get((a, b), 0) - row_sums[a] * col_sums[b] / n) ** 2 / (row_sums[a] * col_sums[b] / n) for a in rows for b in cols)
    return chi2, (len(rows) - 1) * (len(cols) - 1)


def test_every_probe_seed_is_covered():
    assert probe_seed_files() == sorted(KEYS)


@pytest.mark.parametrize("file", sorted(KEYS))
def test_the_printed_example_is_independent_of_the_answer(file):
    env = seed_env_class(file)()
    pairs = []
    for seed in random.Random(0).sample(range(10**9), SEEDS):
        observation, _ = env.reset(seed=seed)
        pairs.append(KEYS[file](env, observation))
    chi2, df = chi_square_dependent(pairs)
    assert df > 0, f"{file}: the answer or the example never varies"
    # Independent: chi2 ~ chi-square(df), mean df, sd sqrt(2 df); 6 sd above is a p-value far below 1e-6.
    assert chi2 < df + 6 * (2 * df) ** 0.5, f"{file}: the example depends on the answer (chi2 {chi2:.0f}, df {df})"


def test_the_check_finds_an_example_that_leaks_the_answer():
    rng = random.Random(1)
    leaky = [(a, a if rng.random() < 0.5 else rng.randrange(3)) for a in (rng.randrange(3) for _ in range(SEEDS))]
    chi2, df = chi_square_dependent(leaky)
    assert chi2 > df + 6 * (2 * df) ** 0.5
