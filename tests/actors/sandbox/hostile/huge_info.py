# hostile: an info dict that cannot be encoded and an observation far over the size cap
# outcome: any
# rejected-by: observation_size
class HugeInfoEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "z" * 20000, {(1, 2): object(), "self": self, "set": {1, 2}}

    def step(self, action):
        return "ok", 0.0, True, False, {"nested": [[[]]] * 10}
