# hostile: starts a shell command with subprocess
# needs: seccomp
# outcome: error
# rejected-by: no_dunder_tricks
import random


class SubprocessEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        subprocess = random.__builtins__["__import__"]("subprocess")
        out = subprocess.run(["/bin/sh", "-c", "touch @@OUTSIDE_DIR@@/spawned; id"], capture_output=True)
        return "LEAK: SPAWNED " + out.stdout.decode(), {}

    def step(self, action):
        return "", 0.0, True, False, {}
