"""Name the next shape of a repeating pattern; two misses lose."""
import random
import re

S = ["circle", "square", "star", "moon"]


class ShapeCycleEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        r = random.Random(seed)
        c, n = r.sample(S, r.choice([2, 3])), r.randint(5, 7)
        self.seq, self.ans = [c[i % len(c)] for i in range(n)], c[n % len(c)]
        self.e = r.choice(S)
        self.turn_count, self.wrong, self.done = 0, 0, False
        return self.obs(""), {}

    def obs(self, msg):
        return (f"{msg}Pattern: {', '.join(self.seq)}, ? What comes next? Options: {', '.join(S)}. "
                f"Misses {self.wrong}/2 (2 lose). Answer as \\boxed{{{self.e}}}.")

    def step(self, action):
        if self.done:
            return "Game over.", 0.0, True, False, {}
        self.turn_count += 1
        a = (re.findall(r"\\boxed\{(.*?)\}", str(action)) + [""])[0].strip().lower()
        win = a == self.ans
        self.wrong += a in S and not win
        end = win or self.wrong >= 2
        tr = not end and self.turn_count >= self.max_turns
        self.done = end or tr
        msg = "Correct! You win. " if win else "Wrong. " if a in S else "Bad reply. "
        return self.obs(msg), float(win), end, tr, {}

    def solution(self):
        return [self.ans]
