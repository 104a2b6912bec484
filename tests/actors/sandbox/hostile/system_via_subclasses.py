# hostile: os.system reached through object.__subclasses__() and a function's __globals__
# needs: seccomp
# outcome: any
# rejected-by: no_dunder_tricks
class SystemEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        for cls in ().__class__.__base__.__subclasses__():
            if cls.__name__ == "_wrap_close":
                status = cls.__init__.__globals__["system"]("touch @@OUTSIDE_DIR@@/system")
                return f"system returned {status}", {}
        return "no os", {}

    def step(self, action):
        return "", 0.0, True, False, {}
