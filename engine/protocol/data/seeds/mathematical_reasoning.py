"""Modular clock: identify a hidden number from its remainders.

Mathematical Reasoning seed environment. A whole number N between 0 and an
upper bound U (60 <= U <= 300, shown to the player) is hidden. Each turn the
player may ask for N modulo a small integer, and finally names N. Remainders
modulo pairwise coprime numbers whose product exceeds U fix N uniquely
(Chinese Remainder Theorem). One wrong answer ends the game.
Actions: \\boxed{mod K} with 2 <= K <= 13, or \\boxed{answer N}.
"""
import random
import re

BOXED = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)
COPRIME_MODULI = [13, 11, 9, 8, 7, 5]


class ModularClockEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.upper = self.rng.randint(60, 300)
        self.secret = self.rng.randint(0, self.upper)
        self.known = {}
        self.turn_count = 0
        self.done = False
        return self._observation(f"A whole number N with 0 <= N <= {self.upper} is hidden."), {}

    def _observation(self, message):
        facts = ", ".join(f"N mod {k} = {r}" for k, r in sorted(self.known.items()))
        return (
            f"{message}\nKnown remainders: {facts or 'none yet'}.\n"
            f"Turn {self.turn_count}/{self.max_turns}.\n"
            "Actions: \\boxed{mod K} (K from 2 to 13) reveals N mod K; "
            "\\boxed{answer N} names the number (a wrong answer loses).\n"
            "Reply with exactly one action inside \\boxed{...}."
        )

    def step(self, action):
        if self.done:
            return self._observation("The game is over; call reset() to play again."), 0.0, True, False, {}
        self.turn_count += 1
        text = str(action)
        match = BOXED.search(text)
        command = (match.group(1) if match else text).strip().lower()
        query = re.fullmatch(r"mod\s*(\d{1,3})", command)
        guess = re.fullmatch(r"answer\s*(-?\d{1,6})", command)
        if query and 2 <= int(query.group(1)) <= 13:
            k = int(query.group(1))
            self.known[k] = self.secret % k
            message = f"N mod {k} = {self.secret % k}."
        elif guess:
            self.done = True
            if int(guess.group(1)) == self.secret:
                return self._observation(f"Correct: N = {self.secret}. You win!"), 1.0, True, False, {}
            return self._observation(f"Wrong: N was {self.secret}. You lose."), 0.0, True, False, {}
        elif query:
            message = "The modulus must be between 2 and 13."
        else:
            message = "Unrecognised action. Use \\boxed{mod 7} or \\boxed{answer 42}."
        truncated = self.turn_count >= self.max_turns
        self.done = truncated
        return self._observation(message + (" Out of turns." if truncated else "")), 0.0, False, truncated, {}

    def solution(self):
        actions, product = [], 1
        for k in COPRIME_MODULI:
            if product > self.upper:
                break
            actions.append(f"mod {k}")
            product *= k
        return actions + [f"answer {self.secret}"]
