# hostile: breaks len, sorted, math.pi and random.randint for whoever runs next
# outcome: any
# rejected-by: no_dunder_tricks
import math
import random


class MutateBuiltinsEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        __builtins__["len"] = lambda value: 0
        random.__builtins__["sorted"] = lambda value: ["broken"]
        math.pi = 3
        random.randint = lambda a, b: a

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "ok", 0.0, True, False, {}
