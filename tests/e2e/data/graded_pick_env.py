import random
import re


class GradedPickEnv:
    """Pick the hidden number, 1 or 2; an answer that is neither ends the game with a penalty drawn from the seed."""

    def __init__(self, max_turns=3, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        self._rng = random.Random(seed)
        self.target = self._rng.randint(1, 2)
        self.penalty = 0.05 + 0.4 * self._rng.random()
        self.turn_count = 0
        return f"Round {self._rng.randint(0, 9999)}: pick 1 or 2. Answer as \\boxed{{n}}.", {}

    def step(self, action):
        self.turn_count += 1
        match = re.search(r"\\boxed\{(.*?)\}", action)
        guess = (match.group(1) if match else action).strip()
        if guess == str(self.target):
            return "Correct!", 1.0, True, False, {}
        if guess in ("1", "2"):
            return "Wrong pick.", 0.0, True, False, {}
        return "Not a pick: that costs you.", -self.penalty, True, False, {}

    def solution(self):
        return [str(self.target)]
