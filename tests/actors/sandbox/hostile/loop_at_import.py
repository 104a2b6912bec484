# hostile: infinite loop while the module is executed
# outcome: timeout
# rejected-by: loads
while True:
    pass


class LoopAtImportEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "hi", {}

    def step(self, action):
        return "", 0.0, True, False, {}
