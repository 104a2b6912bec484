"""Add two small numbers; pick the sum from five options (a miss says too high or too low)."""
import random
import re


class SumEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        r = random.Random(seed)
        self.a, self.b = r.randint(1, 5), r.randint(1, 4)
        lo = max(0, self.a + self.b - r.randint(0, 4))
        self.opts = list(range(lo, lo + 5))
        self.e = r.choice(self.opts)
        self.turn_count, self.done = 0, False
        return self.obs("Add the numbers."), {}

    def obs(self, msg):
        return f"{msg} What is {self.a} + {self.b}? Options: {self.opts}. Answer one option as \\boxed{{{self.e}}}."

    def step(self, action):
        if self.done:
            return self.obs("Game over."), 0.0, True, False, {}
        self.turn_count += 1
        m = re.search(r"\\boxed\{(.*?)\}", str(action))
        a, s = m.group(1).strip() if m else "", self.a + self.b
        if a == str(s):
            self.done = True
            return self.obs("Correct! You win."), 1.0, True, False, {}
        ok = a.isdecimal() and len(a) < 9
        msg = ("Too high." if int(a) > s else "Too low.") if ok else "Bad reply."
        self.done = self.turn_count >= self.max_turns
        return self.obs(msg), 0.0, False, self.done, {}

    def solution(self):
        return [str(self.a + self.b)]
