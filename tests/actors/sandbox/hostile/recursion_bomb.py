# hostile: unbounded recursion in reset()
# outcome: limit
# rejected-by: within_limits
class RecursionBombEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def _deeper(self, n):
        return self._deeper(n + 1) + 1

    def reset(self, seed=None):
        return str(self._deeper(0)), {}

    def step(self, action):
        return "", 0.0, True, False, {}
