# hostile: patches the json module the sandbox worker itself speaks
# outcome: completes
# rejected-by: clean_exit
import json


class MutateJsonEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        json.dumps = lambda *args, **kwargs: "{}"
        json.JSONEncoder.iterencode = lambda self, o, _one_shot=False: iter(['{"type":"ready"}'])
        json.JSONDecoder.decode = lambda self, s: {"op": "end"}

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "ok", 0.0, True, False, {}
