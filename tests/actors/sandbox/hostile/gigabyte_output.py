# hostile: prints a gigabyte, writes to fd 1 directly, then returns a 50 MB observation
# outcome: limit
# rejected-by: no_dunder_tricks
import random


class GigabyteEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        chunk = "x" * (1 << 20)
        for _ in range(1024):
            print(chunk)
        random._os.write(1, b"garbage frame" * 100000)
        return "after printing", {}

    def step(self, action):
        return "y" * (50 << 20), 0.0, True, False, {}
