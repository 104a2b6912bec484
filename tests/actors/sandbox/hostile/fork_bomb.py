# hostile: fork bomb through the os module that random imports
# needs: seccomp
# outcome: error
# rejected-by: no_dunder_tricks
import random


class ForkBombEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        os = random._os
        while True:
            os.fork()

    def step(self, action):
        return "", 0.0, True, False, {}
