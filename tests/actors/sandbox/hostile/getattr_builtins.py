# hostile: getattr(__builtins__, ...) to reach the import machinery and open()
# outcome: error
# rejected-by: no_dunder_tricks
class GetattrBuiltinsEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        b = __builtins__
        get = getattr(b, "get", None) or (lambda name: getattr(b, name))
        opener = get("open")
        if opener is not None:
            return opener("/etc/passwd").read(), {}
        return get("__import__")("os").popen("id").read(), {}

    def step(self, action):
        return "", 0.0, True, False, {}
