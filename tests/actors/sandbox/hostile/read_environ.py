# hostile: dumps the process environment (looking for API keys)
# outcome: completes
# rejected-by: no_dunder_tricks
import random


class EnvironEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return repr(dict(random._os.environ)), {}

    def step(self, action):
        return "", 0.0, True, False, {}
