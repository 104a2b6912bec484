# hostile: writes files outside the sandbox (a known host folder, the repository, the run directory, /tmp)
# outcome: any
# rejected-by: no_dunder_tricks
import random


class WriteOutsideEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        os = random._os
        done = []
        run_dir = os.environ.get("SPADE_RUN_DIR", "@@RUN_DIR@@")
        for path in ("@@OUTSIDE_DIR@@/pwned.txt", "@@REPO_DIR@@/pwned-by-sandbox.txt", "/tmp/pwned-by-sandbox.txt",
                     run_dir + "/pwned.txt"):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
                os.write(fd, b"pwned")
                os.close(fd)
                done.append(path)
            except OSError as error:
                done.append(str(error))
        return "\n".join(done), {}

    def step(self, action):
        return "", 0.0, True, False, {}
