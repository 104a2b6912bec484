"""Expedition packing: a 0/1 knapsack played one item at a time.

Optimization seed environment. Six items have weights and values and the pack
has a weight capacity. The player takes or drops items (a take that would
exceed the capacity is refused) and then submits. Submitting wins only if the
packed value equals the best value achievable; any other submission loses.
Instances are generated so that greedily packing by value/weight ratio falls short.
Actions: \\boxed{take K}, \\boxed{drop K}, \\boxed{submit}.
"""
import itertools
import random
import re

BOXED = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)
ITEMS = ["rope", "lantern", "tent", "stove", "map", "radio", "water", "medkit", "axe", "compass"]


class ExpeditionPackEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        while True:
            self.names = self.rng.sample(ITEMS, 6)
            self.weights = [self.rng.randint(2, 9) for _ in range(6)]
            self.values = [self.rng.randint(3, 15) for _ in range(6)]
            self.capacity = sum(self.weights) // 2
            self.best = max(itertools.chain.from_iterable(
                itertools.combinations(range(6), k) for k in range(7)), key=self._value_if_fits)
            if self._greedy_value() < self._value_if_fits(self.best):
                break
        self.packed = set()
        self.turn_count = 0
        self.done = False
        return self._observation("Pack the most valuable load that fits."), {}

    def _value_if_fits(self, subset):
        fits = sum(self.weights[i] for i in subset) <= self.capacity
        return sum(self.values[i] for i in subset) if fits else -1

    def _greedy_value(self):
        chosen, load = [], 0
        for i in sorted(range(6), key=lambda i: -self.values[i] / self.weights[i]):
            if load + self.weights[i] <= self.capacity:
                chosen.append(i)
                load += self.weights[i]
        return self._value_if_fits(chosen)

    def _observation(self, message):
        rows = [f"{i + 1}. {self.names[i]}: weight {self.weights[i]}, value {self.values[i]}"
                + (" [packed]" if i in self.packed else "") for i in range(6)]
        load = sum(self.weights[i] for i in self.packed)
        return (
            f"{message}\n" + "\n".join(rows)
            + f"\nLoad {load}/{self.capacity}, value {sum(self.values[i] for i in self.packed)}. "
            f"Turn {self.turn_count}/{self.max_turns}.\n"
            "Actions: \\boxed{take K} or \\boxed{drop K} (K = item number), \\boxed{submit} "
            "to finish (wins only with the maximum possible value)."
        )

    def step(self, action):
        if self.done:
            return self._observation("The game is over; call reset()."), 0.0, True, False, {}
        self.turn_count += 1
        text = str(action)
        match = BOXED.search(text)
        command = (match.group(1) if match else text).strip().lower()
        move = re.fullmatch(r"(take|drop)\s*(\d{1,2})", command)
        if command == "submit":
            self.done = True
            value, best = self._value_if_fits(self.packed), self._value_if_fits(self.best)
            if value == best:
                return self._observation(f"Value {value} is optimal. You win!"), 1.0, True, False, {}
            return self._observation(f"Value {value}, but {best} was possible. You lose."), 0.0, True, False, {}
        if move and 1 <= int(move.group(2)) <= 6:
            i = int(move.group(2)) - 1
            load = sum(self.weights[j] for j in self.packed)
            if move.group(1) == "drop":
                self.packed.discard(i)
                message = f"Dropped {self.names[i]}."
            elif i not in self.packed and load + self.weights[i] > self.capacity:
                message = f"The {self.names[i]} does not fit."
            else:
                self.packed.add(i)
                message = f"Packed {self.names[i]}."
        else:
            message = "Unrecognised action. Use \\boxed{take 2}, \\boxed{drop 2} or \\boxed{submit}."
        truncated = self.turn_count >= self.max_turns
        self.done = truncated
        return self._observation(message + (" Out of turns." if truncated else "")), 0.0, False, truncated, {}

    def solution(self):
        return [f"take {i + 1}" for i in self.best] + ["submit"]
