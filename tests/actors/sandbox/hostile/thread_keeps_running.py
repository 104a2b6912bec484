# hostile: starts a thread that keeps mutating shared state after the episode
# outcome: any
# rejected-by: no_dunder_tricks
import random


class ThreadEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        threading = random.__builtins__["__import__"]("threading")

        def meddle():
            while True:
                random.seed(0)

        threading.Thread(target=meddle, daemon=True).start()

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "ok", 0.0, True, False, {}
