# hostile: __import__("os") to write outside
# outcome: error
# rejected-by: no_dunder_tricks
class DunderImportEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        __import__("os").system("touch @@OUTSIDE_DIR@@/dunder")
        return "LEAK: IMPORTED", {}

    def step(self, action):
        return "", 0.0, True, False, {}
