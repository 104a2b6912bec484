# hostile: the game depends on hash() of a string, which is randomised per process
# outcome: completes
# rejected-by: deterministic
class HashEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.code = hash(f"game-{seed}") % 100000
        self.target = self.code % 10
        self.turn = 0
        return f"Game {self.code}: guess a digit.", {}

    def step(self, action):
        self.turn += 1
        if action == f"\\boxed{{{self.target}}}":
            return "Correct!", 1.0, True, False, {}
        return f"Wrong, it was {self.target}.", 0.0, False, self.turn >= self.max_turns, {}
