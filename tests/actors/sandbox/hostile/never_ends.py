# hostile: an episode that never terminates nor truncates
# outcome: completes
# rejected-by: ends_within_max_turns
class NeverEndsEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.turn = 0
        return f"Keep going (seed {seed}).", {}

    def step(self, action):
        self.turn += 1
        return f"Turn {self.turn}, keep going.", 0.0, False, False, {}
