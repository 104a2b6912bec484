"""Sequence forecast: predict the next terms of a generated integer sequence.

Pattern Recognition seed environment. The first five terms of a sequence built
by a hidden rule (arithmetic, geometric, quadratic, Fibonacci-like, alternating
steps, or "double then add") are shown. The player predicts the next three terms
one at a time; each correct prediction is appended. Two wrong predictions lose.
Actions: \\boxed{N} with N an integer.
"""
import random
import re

BOXED = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)
SHOWN, HIDDEN = 5, 3


class SequenceForecastEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.terms = self._generate(SHOWN + HIDDEN)
        self.revealed = SHOWN
        self.mistakes = 0
        self.turn_count = 0
        self.done = False
        return self._observation("A hidden rule generates this sequence."), {}

    def _generate(self, n):
        rng = self.rng
        kind = rng.choice(["arithmetic", "geometric", "quadratic", "fibonacci", "alternating", "double"])
        if kind == "arithmetic":
            a, d = rng.randint(-20, 20), rng.choice([-9, -7, -5, -3, 2, 3, 4, 6, 8, 11])
            return [a + d * i for i in range(n)]
        if kind == "geometric":
            a, r = rng.randint(1, 5), rng.choice([2, 3, -2])
            return [a * r ** i for i in range(n)]
        if kind == "quadratic":
            a, b, c = rng.randint(-5, 5), rng.randint(-4, 4), rng.randint(1, 3)
            return [a + b * i + c * i * i for i in range(n)]
        if kind == "alternating":
            terms, steps = [rng.randint(0, 10)], (rng.randint(2, 9), -rng.randint(1, 5))
            for i in range(n - 1):
                terms.append(terms[-1] + steps[i % 2])
            return terms
        terms = [rng.randint(1, 6), rng.randint(1, 9)]
        offset = rng.randint(-3, 3)
        while len(terms) < n:
            terms.append(terms[-1] + terms[-2] if kind == "fibonacci" else 2 * terms[-1] + offset)
        return terms

    def _observation(self, message):
        shown = ", ".join(str(t) for t in self.terms[: self.revealed])
        return (
            f"{message}\nSequence: {shown}, ?\n"
            f"Predicted {self.revealed - SHOWN}/{HIDDEN} hidden terms; wrong guesses {self.mistakes}/2; "
            f"turn {self.turn_count}/{self.max_turns}.\n"
            "Action: predict the next term as an integer, e.g. \\boxed{17}."
        )

    def step(self, action):
        if self.done:
            return self._observation("The game is over; call reset()."), 0.0, True, False, {}
        self.turn_count += 1
        text = str(action)
        match = BOXED.search(text)
        command = (match.group(1) if match else text).strip()
        if not re.fullmatch(r"-?\d{1,12}", command):
            message = "Please give a single integer inside \\boxed{...}, e.g. \\boxed{-4}."
        elif int(command) == self.terms[self.revealed]:
            self.revealed += 1
            if self.revealed == len(self.terms):
                self.done = True
                return self._observation("All three predictions correct. You win!"), 1.0, True, False, {}
            message = "Correct! The term has been added."
        else:
            self.mistakes += 1
            if self.mistakes >= 2:
                self.done = True
                return self._observation("Second wrong prediction. You lose."), 0.0, True, False, {}
            message = "Wrong prediction; one more mistake loses."
        truncated = self.turn_count >= self.max_turns
        self.done = truncated
        return self._observation(message + (" Out of turns." if truncated else "")), 0.0, False, truncated, {}

    def solution(self):
        return [str(t) for t in self.terms[SHOWN:]]
