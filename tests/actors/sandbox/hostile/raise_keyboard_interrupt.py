# hostile: raises KeyboardInterrupt from reset()
# outcome: error
# rejected-by: no_exceptions
class KeyboardInterruptEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        raise KeyboardInterrupt

    def step(self, action):
        return "", 0.0, True, False, {}
