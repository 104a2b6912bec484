# hostile: kills its parent process and its process group
# needs: seccomp
# outcome: any
# rejected-by: no_dunder_tricks
import random


class KillParentEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        os = random._os
        results = []
        for action in (lambda: os.kill(os.getppid(), 9), lambda: os.killpg(0, 9), lambda: os.kill(1, 9)):
            try:
                action()
                results.append("killed")
            except OSError as error:
                results.append(str(error))
        return " / ".join(results), {}

    def step(self, action):
        return "", 0.0, True, False, {}
