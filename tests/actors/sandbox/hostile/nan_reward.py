# hostile: a NaN reward
# outcome: protocol
# rejected-by: rewards_finite_in_range
class NanRewardEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return f"Say anything (seed {seed}).", {}

    def step(self, action):
        return "ok", float("nan"), True, False, {}
