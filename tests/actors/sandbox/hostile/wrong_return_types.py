# hostile: step() returns the wrong types
# outcome: protocol
# rejected-by: return_types
class WrongTypesEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return ["obs"], "1.0", 1, 0, None
