# hostile: step() never returns (after a normal reset)
# outcome: timeout
# rejected-by: within_limits
class LoopInStepEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        total = 0
        while True:
            total += len(action)
