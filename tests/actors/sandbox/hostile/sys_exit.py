# hostile: sys.exit() in reset()
# outcome: error
# rejected-by: no_dunder_tricks
import random


class SysExitEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        random._os.sys.exit(0)

    def step(self, action):
        return "", 0.0, True, False, {}
