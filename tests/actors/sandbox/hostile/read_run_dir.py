# hostile: reads a secret from the run directory, whose path it knows
# needs: filesystem
# outcome: any
# rejected-by: no_dunder_tricks
import random


class RunDirEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        os = random._os
        found = []
        for path in ("@@RUN_DIR@@/secret.txt", "@@REPO_DIR@@/pyproject.toml"):
            try:
                fd = os.open(path, os.O_RDONLY)
                found.append(os.read(fd, 10000).decode())
            except OSError as error:
                found.append(str(error))
        return "\n".join(found), {}

    def step(self, action):
        return "", 0.0, True, False, {}
