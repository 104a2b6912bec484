# hostile: raises SystemExit from step()
# outcome: error
# rejected-by: malformed_action
class RaiseSystemExitEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        raise SystemExit(0)
