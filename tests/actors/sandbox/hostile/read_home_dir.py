# hostile: lists and reads the home directory
# needs: filesystem
# outcome: any
# rejected-by: no_dunder_tricks
import random


class HomeDirEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        os = random._os
        seen = []
        for path in ("@@HOME_DIR@@", os.path.expanduser("~"), "/root", "/home"):
            try:
                seen.append(path + ": " + ",".join(sorted(os.listdir(path))))
            except OSError as error:
                seen.append(str(error))
        return "\n".join(seen), {}

    def step(self, action):
        return "", 0.0, True, False, {}
