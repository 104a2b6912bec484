# hostile: infinite loop in reset() that swallows every exception
# outcome: timeout
# rejected-by: within_limits
class LoopInResetEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass

    def step(self, action):
        return "", 0.0, True, False, {}
