# hostile: reads /etc/passwd through io.FileIO, found by walking object's subclasses
# needs: filesystem
# outcome: any
# rejected-by: no_dunder_tricks
class PasswdEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        pending, classes = [().__class__.__base__], []
        while pending:
            cls = pending.pop()
            classes.append(cls)
            pending += type.__subclasses__(cls)
        file_io = [c for c in classes if c.__name__ == "FileIO"][0]
        try:
            return file_io("/etc/passwd").read().decode(), {}
        except OSError as error:
            return f"cannot read: {error}", {}

    def step(self, action):
        return "", 0.0, True, False, {}
