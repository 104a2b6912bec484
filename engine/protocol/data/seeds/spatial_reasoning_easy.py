"""Move left or right on a 5-cell line to reach G."""
import random
import re


class LineWalkEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        r = random.Random(seed)
        self.p = r.randint(0, 4)
        self.g = r.choice([g for g in range(5) if 0 < abs(g - self.p) < 3])
        self.d, self.turn_count, self.done = r.sample(["left", "right"], 2), 0, False
        return self.obs("Reach G."), {}

    def obs(self, msg):
        row = " ".join("P" if i == self.p else "G" if i == self.g else "." for i in range(5))
        return f"{msg} Line: {row} (you are P). Actions: \\boxed{{{self.d[0]}}} or \\boxed{{{self.d[1]}}}."

    def step(self, action):
        if self.done:
            return "Game over.", 0.0, True, False, {}
        self.turn_count += 1
        a = (re.findall(r"\\boxed\{(.*?)\}", str(action)) + [""])[0].strip().lower()
        d = {"left": -1, "right": 1}.get(a, 0)
        q = min(4, max(0, self.p + d))
        msg = "Moved." if q != self.p else "A wall blocks you." if d else "Bad reply."
        self.p, win = q, q == self.g
        self.done = win or self.turn_count >= self.max_turns
        return self.obs("You reached G!" if win else msg), float(win), win, self.done and not win, {}

    def solution(self):
        return ["left" if self.g < self.p else "right"] * abs(self.g - self.p)
