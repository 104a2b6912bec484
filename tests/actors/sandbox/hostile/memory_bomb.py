# hostile: allocates ever larger blocks in reset() until something gives
# outcome: limit
# rejected-by: within_limits
class MemoryBombEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        blocks, size = [], 1 << 20
        while True:
            blocks.append(bytearray(size))
            size *= 4
        return "never", {}

    def step(self, action):
        return "", 0.0, True, False, {}
