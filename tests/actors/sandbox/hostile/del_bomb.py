# hostile: an object whose __del__ loops forever, left in a reference cycle for the clean-up to find
# outcome: completes
# rejected-by: clean_exit
class Trap:
    def __init__(self):
        self.me = self

    def __del__(self):
        while True:
            pass


class DelBombEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.trap = Trap()

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "ok", 1.0, True, False, {}
