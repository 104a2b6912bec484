# hostile: closes and redirects stdin/stdout and fds 0-2, then closes every descriptor
# outcome: crashed
# rejected-by: no_dunder_tricks
import random


class CloseStdioEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        os = random._os
        os.sys.stdout.close()
        os.sys.stdin = None
        os.sys.stdout = os.sys.stderr
        for fd in (0, 1, 2):
            os.close(fd)
        return "still talking", {}

    def step(self, action):
        random._os.closerange(0, 1024)
        return "", 0.0, True, False, {}
