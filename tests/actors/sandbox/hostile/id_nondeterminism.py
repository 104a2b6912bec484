# hostile: the observation depends on id(), which differs between processes
# outcome: completes
# rejected-by: deterministic
class IdEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.turn = 0
        return f"Game {id(object()) % 100003} (seed {seed}).", {}

    def step(self, action):
        self.turn += 1
        return f"Turn {self.turn}.", 0.0, False, self.turn >= self.max_turns, {}
