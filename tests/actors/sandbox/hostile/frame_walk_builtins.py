# hostile: walks the frames up from a traceback to the worker's own globals, takes the real builtins' open and reads secrets, /etc/passwd and the parent's environment
# needs: filesystem
# outcome: any
# rejected-by: no_dunder_tricks
import random


class FrameWalkEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        try:
            raise ValueError("walk")
        except ValueError as error:
            frame = error.__traceback__.tb_frame
        reader = None
        while frame is not None and reader is None:
            found = frame.f_globals.get("__builtins__")
            reader = found.get("open") if isinstance(found, dict) else getattr(found, "open", None)
            frame = frame.f_back
        if reader is None:
            return "no open found", {}
        seen = []
        for number, path in enumerate(("@@HOME_DIR@@/home-marker-5d1e", "/etc/passwd", f"/proc/{random._os.getppid()}/environ")):
            try:
                with reader(path, "rb") as handle:
                    seen.append(f"file {number}: {handle.read()!r}")
            except OSError as error:
                seen.append(f"file {number}: {error.strerror}")
        return "\n".join(seen), {}

    def step(self, action):
        return "", 0.0, True, False, {}
