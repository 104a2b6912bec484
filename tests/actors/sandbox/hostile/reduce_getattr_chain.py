# hostile: object().__reduce_ex__ hands over copyreg.__newobj__, whose __globals__ hold the real builtins: open reads secrets, /etc/passwd and the parent's environment
# needs: filesystem
# outcome: any
# rejected-by: no_dunder_tricks
class ReduceChainEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        newobj = getattr(object(), "__reduce_ex__")(2)[0]
        real = getattr(newobj, "__globals__")["__builtins__"]
        reader = real["open"] if isinstance(real, dict) else getattr(real, "open")
        ppid = real["__import__"]("os").getppid()  # the real __import__ admits any module
        seen = []
        for number, path in enumerate(("@@HOME_DIR@@/home-marker-5d1e", "/etc/passwd", f"/proc/{ppid}/environ")):
            try:
                with reader(path, "rb") as handle:
                    seen.append(f"file {number}: {handle.read()!r}")
            except OSError as error:
                seen.append(f"file {number}: {error.strerror}")
        return "\n".join(seen), {}

    def step(self, action):
        return "", 0.0, True, False, {}
