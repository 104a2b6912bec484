# hostile: raises the recursion limit through os.sys and overflows the C stack (segfault)
# outcome: crashed
# rejected-by: no_dunder_tricks
import random


class CStackEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        random._os.sys.setrecursionlimit(10 ** 7)
        def deeper(n):
            return sum(map(deeper, [n + 1]))  # every level goes through C, so the C stack overflows
        return str(deeper(0)), {}

    def step(self, action):
        return "", 0.0, True, False, {}
