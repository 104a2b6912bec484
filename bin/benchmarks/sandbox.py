"""Sandbox benchmark: what isolating an environment costs, measured in one run against two baselines.

    .venv/bin/python bin/benchmarks/sandbox.py        (or bin/bench sandbox)

A 10-step episode of a small text game, played (a) by calling the environment in-process (no isolation: the
limit), (b) through the warm sandbox pool (a fresh namespace in a long-lived sandboxed worker; the default pool
of 2 workers with one caller playing episodes back to back, so that a worker's clean-up behind one episode
overlaps the next episode on the other worker), and (c) in a fresh interpreter started for the episode
(`python3 -I -S`, no sandbox at all: the cheapest separate process; a fresh sandboxed worker per episode is
shown too). (b) and (c) are measured in alternating rounds so that both see the same load on a shared machine;
the load average is printed with the figures. Prints steps/s, the time of an episode and its overhead beyond
the steps, the pool's step round trip, and ends with one JSON line whose `ratio` is (c) per-episode time /
(b) per-episode time (target 20). Targets: (b) overhead under 2 ms an episode, a round trip under 100 us.
"""

import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import trio  # noqa: E402

from actors.sandbox import open_sandbox_pool  # noqa: E402
from actors.sandbox.isolation import find_interpreter  # noqa: E402

STEPS = 10
ROUNDS = 3
ENV_SOURCE = '''
import random
import re

BOXED = re.compile(r"\\\\boxed\\{(-?\\d+)\\}")


class CounterEnv:
    """Reach the target sum by adding numbers; 10 turns."""

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.target = self.rng.randint(20, 60)
        self.total = 0
        self.turn = 0
        return f"Reach {self.target} by adding numbers from 1 to 9. Total: 0.", {}

    def step(self, action):
        self.turn += 1
        match = BOXED.search(action)
        if match is None:
            return "Answer as \\\\boxed{N}.", -0.1, False, self.turn >= self.max_turns, {}
        self.total += int(match.group(1))
        if self.total == self.target:
            return "Exactly!", 1.0, True, False, {}
        over = self.total > self.target
        truncated = self.turn >= self.max_turns
        return f"Total: {self.total}.", (-1.0 if over else 0.0), over, truncated and not over, {"turn": self.turn}
'''
ACTIONS = [f"\\boxed{{{n}}}" for n in (3, 1, 2, 1, 1, 2, 1, 1, 2, 1)]

# The whole episode in one fresh interpreter: read the source on stdin, play, print the rewards.
FRESH_SCRIPT = f"""
import sys, json
namespace = {{}}
exec(compile(sys.stdin.read(), "<environment>", "exec"), namespace)
env = namespace["CounterEnv"]()
env.reset(seed=int(sys.argv[1]))
rewards = [env.step(a)[1] for a in {ACTIONS!r}]
print(json.dumps(rewards))
"""


def median_of_rounds(measure) -> float:
    return statistics.median(measure() for _ in range(ROUNDS))


def in_process() -> dict[str, float]:
    namespace: dict = {}
    exec(compile(ENV_SOURCE, "<environment>", "exec"), namespace)
    cls = namespace["CounterEnv"]

    def episodes(n: int = 2000) -> float:
        start = time.perf_counter()
        for seed in range(n):
            env = cls()
            env.reset(seed=seed)
            for action in ACTIONS:
                env.step(action)
        return (time.perf_counter() - start) / n

    def step_time(n: int = 20000) -> float:
        env = cls(max_turns=10 ** 9)
        env.reset(seed=0)
        start = time.perf_counter()
        for _ in range(n):
            env.step("\\boxed{0}")
        return (time.perf_counter() - start) / n

    episode, step = median_of_rounds(episodes), median_of_rounds(step_time)
    return {"episode_s": episode, "step_s": step}


def fresh_episode(python: str, seed: int) -> None:
    out = subprocess.run([python, "-I", "-S", "-c", FRESH_SCRIPT, str(seed)], input=ENV_SOURCE,
                         capture_output=True, text=True, check=True, cwd="/")
    assert len(json.loads(out.stdout)) == STEPS


async def play(pool, seed: int, **options) -> None:
    async with pool.open_episode(ENV_SOURCE, **options) as episode:
        await episode.reset(seed=seed)
        for action in ACTIONS:
            await episode.step(action)


async def timed(n: int, episode) -> float:
    start = time.perf_counter()
    for seed in range(n):
        await episode(seed)
    return (time.perf_counter() - start) / n


async def pool_against_fresh() -> dict[str, float | str]:
    """(b) and (c) in alternating rounds, so that both see the same load on a shared machine."""
    python = find_interpreter()
    pool_rounds: list[float] = []
    fresh_rounds: list[float] = []
    # The default pool (2 workers), one caller playing episodes back to back: a worker cleans up behind its
    # episode while the next one runs on the other.
    async with open_sandbox_pool(workers=2) as pool:
        await timed(40, lambda seed: play(pool, seed))  # warm up
        for _ in range(ROUNDS + 2):
            pool_rounds.append(await timed(150, lambda seed: play(pool, seed)))
            fresh_rounds.append(await timed(6, lambda seed: trio.to_thread.run_sync(fresh_episode, python, seed)))

        async def step_time(n: int = 3000) -> float:
            async with pool.open_episode(ENV_SOURCE.replace("max_turns=10", "max_turns=10 ** 9")) as episode:
                await episode.reset(seed=0)
                start = time.perf_counter()
                for _ in range(n):
                    await episode.step("\\boxed{0}")
                return (time.perf_counter() - start) / n

        step = statistics.median([await step_time() for _ in range(ROUNDS)])
        isolation = str(pool.isolation)
    async with open_sandbox_pool(workers=1) as pool:  # clean-up and the next load back to back
        await timed(40, lambda seed: play(pool, seed))
        one_worker = statistics.median([await timed(150, lambda seed: play(pool, seed)) for _ in range(ROUNDS)])

    # Throughput with one worker per core and episodes in flight on all of them.
    cores = os.cpu_count() or 1
    async with open_sandbox_pool(workers=cores) as pool:
        async def loop(count: int) -> None:
            for seed in range(count):
                await play(pool, seed)

        async with trio.open_nursery() as nursery:  # warm up every worker
            for _ in range(cores):
                nursery.start_soon(loop, 10)
        total = 200 * cores
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(cores * 2):
                nursery.start_soon(loop, total // (cores * 2))
        concurrent = total / (time.perf_counter() - start)

    # A fresh sandboxed worker for every episode, for comparison.
    async with open_sandbox_pool(workers=1) as pool:
        sandboxed = statistics.median([await timed(8, lambda seed: play(pool, seed, fresh_worker=True))
                                       for _ in range(ROUNDS)])
    return {"pool_episode_s": statistics.median(pool_rounds), "fresh_episode_s": statistics.median(fresh_rounds),
            "step_s": step, "isolation": isolation, "concurrent_episodes_per_s": concurrent, "workers": cores,
            "fresh_sandboxed_episode_s": sandboxed, "one_worker_episode_s": one_worker}


def main() -> int:
    import argparse

    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # no options: --help says what it measures
    warnings.simplefilter("default")
    load_before = os.getloadavg()[0]
    a = in_process()
    b = trio.run(pool_against_fresh)
    b["episode_s"] = b["pool_episode_s"]
    c = {"episode_s": b["fresh_episode_s"], "step_s": a["step_s"]}  # there a step is an in-process call
    rows = {"in_process": a, "pool": b, "fresh": c}
    load = max(load_before, os.getloadavg()[0])
    figures: dict[str, float | str | bool] = {"isolation": b["isolation"], "steps_per_episode": STEPS,
                                              "load_average": round(load, 2), "cpus": os.cpu_count() or 1}
    print(f"sandbox benchmark: {STEPS}-step episodes, pool isolation {b['isolation']}, "
          f"interpreter {find_interpreter()}, load average {load:.2f} on {os.cpu_count()} CPUs")
    print(f"{'':24}{'steps/s':>12}{'episode ms':>14}{'overhead ms':>14}")
    labels = {"in_process": "(a) in-process", "pool": "(b) warm sandbox pool", "fresh": "(c) fresh interpreter"}
    for name, row in rows.items():
        episode_ms = row["episode_s"] * 1e3
        overhead_ms = max(0.0, (row["episode_s"] - STEPS * row["step_s"]) * 1e3)
        steps_per_s = STEPS / row["episode_s"]
        figures |= {f"{name}_steps_per_s": round(steps_per_s, 1), f"{name}_episode_ms": round(episode_ms, 4),
                    f"{name}_episode_overhead_ms": round(overhead_ms, 4)}
        print(f"{labels[name]:24}{steps_per_s:>12,.0f}{episode_ms:>14.3f}{overhead_ms:>14.3f}")
    round_trip_us = b["step_s"] * 1e6
    sandboxed_ms = b["fresh_sandboxed_episode_s"] * 1e3
    ratio = c["episode_s"] / b["episode_s"]
    figures |= {"pool_step_round_trip_us": round(round_trip_us, 1),
                "pool_one_worker_episode_ms": round(b["one_worker_episode_s"] * 1e3, 4),
                "pool_concurrent_episodes_per_s": round(b["concurrent_episodes_per_s"], 1),
                "pool_workers_concurrent": b["workers"], "fresh_sandboxed_episode_ms": round(sandboxed_ms, 2),
                "ratio_vs_fresh_sandboxed": round(sandboxed_ms / (b["episode_s"] * 1e3), 1)}
    print(f"pool step round trip: {round_trip_us:.1f} us (target < 100)")
    print(f"pool of one worker (clean-up and the next load back to back): "
          f"{b['one_worker_episode_s'] * 1e3:.3f} ms an episode")
    print(f"pool with {b['workers']} workers, episodes in flight on all: "
          f"{b['concurrent_episodes_per_s']:,.0f} episodes/s")
    print(f"fresh sandboxed worker per episode: {sandboxed_ms:.1f} ms an episode")
    print(f"(c)/(b) per episode: {ratio:.1f}x (target 20x)")
    met = {"pool_overhead_under_2ms": figures["pool_episode_overhead_ms"] < 2.0,
           "round_trip_under_100us": round_trip_us < 100.0, "ratio_at_least_20": ratio >= 20.0}
    figures["targets_met"] = all(met.values())
    print("targets: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in met.items()))
    print(json.dumps({"bench": "sandbox", "ratio": round(ratio, 2), "target": 20, **figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
