# hostile: os._exit() in the middle of step()
# outcome: crashed
# rejected-by: no_dunder_tricks
import random


class OsExitEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        random._os._exit(3)
