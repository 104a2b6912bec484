# hostile: ignores SIGTERM and arms an alarm meant to fire during the next episode
# outcome: any
# rejected-by: no_dunder_tricks
import random


class SignalEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        signal = random.__builtins__["__import__"]("signal")
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGALRM, lambda *args: (_ for _ in ()).throw(SystemExit))
        signal.setitimer(signal.ITIMER_REAL, 0.3)

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "ok", 0.0, True, False, {}
