# hostile: infinite loop in __init__
# outcome: timeout
# rejected-by: loads
class LoopInInitEnv:
    def __init__(self, max_turns=12, **kwargs):
        n = 0
        while True:
            n += 1

    def reset(self, seed=None):
        return "hi", {}

    def step(self, action):
        return "", 0.0, True, False, {}
