# hostile: ctypes, to read address 0
# outcome: error
# rejected-by: allowed_imports
import ctypes


class CtypesEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return ctypes.string_at(0, 16).decode(), {}

    def step(self, action):
        return "", 0.0, True, False, {}
