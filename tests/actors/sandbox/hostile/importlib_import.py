# hostile: importlib.import_module("subprocess")
# outcome: error
# rejected-by: allowed_imports
import importlib


class ImportlibEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        importlib.import_module("subprocess").run(["touch", "@@OUTSIDE_DIR@@/importlib"])
        return "LEAK: IMPORTED", {}

    def step(self, action):
        return "", 0.0, True, False, {}
