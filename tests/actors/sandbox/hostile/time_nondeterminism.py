# hostile: seeds itself from the clock
# outcome: error
# rejected-by: allowed_imports
import random
import time


class ClockEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.target = random.Random(time.time()).randint(1, 100)
        return "Guess a number from 1 to 100.", {}

    def step(self, action):
        return f"The number was {self.target}.", 0.0, True, False, {}
