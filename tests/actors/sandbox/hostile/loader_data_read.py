# hostile: an allowed module's loader reads any file (get_data): secrets, /etc/passwd and the parent's environment
# needs: filesystem
# outcome: any
# rejected-by: no_dunder_tricks
import json
import random


class LoaderReadEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        loader = random.__spec__.loader if hasattr(random.__spec__.loader, "get_data") else json.__loader__
        seen = []
        for number, path in enumerate(("@@HOME_DIR@@/home-marker-5d1e", "/etc/passwd", f"/proc/{random._os.getppid()}/environ")):
            try:
                seen.append(f"file {number}: {loader.get_data(path)!r}")
            except OSError as error:
                seen.append(f"file {number}: {error.strerror}")
        return "\n".join(seen), {}

    def step(self, action):
        return "", 0.0, True, False, {}
