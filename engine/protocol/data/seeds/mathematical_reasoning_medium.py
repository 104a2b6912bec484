"""Solve a*x + b = c for x in 1-9; two misses lose."""
import random
import re


class EquationEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        r = random.Random(seed)
        self.a, self.x, self.b, self.e = r.randint(2, 5), r.randint(1, 9), r.randint(1, 9), r.randint(1, 9)
        self.turn_count, self.wrong, self.done = 0, 0, False
        return self.obs("Find x."), {}

    def obs(self, msg):
        c = self.a * self.x + self.b
        return (f"{msg} {self.a}*x + {self.b} = {c}, x is 1-9. Misses {self.wrong}/2 (2 lose). "
                f"Answer x as \\boxed{{{self.e}}}.")

    def step(self, action):
        if self.done:
            return self.obs("Game over."), 0.0, True, False, {}
        self.turn_count += 1
        m = re.search(r"\\boxed\{(.*?)\}", str(action))
        a = m.group(1).strip() if m else ""
        if a == str(self.x):
            self.done = True
            return self.obs("Correct! You win."), 1.0, True, False, {}
        msg = "Bad reply."
        if a.isdecimal() and len(a) < 9:
            self.wrong += 1
            msg = "Too high." if int(a) > self.x else "Too low."
        tr = self.turn_count >= self.max_turns
        self.done = tr or self.wrong >= 2
        return self.obs(msg), 0.0, self.wrong >= 2, tr, {}

    def solution(self):
        return [str(self.x)]
