"""Walk to G on a 3x3 map."""
import random
import re

D = {"up": -3, "down": 3, "left": -1, "right": 1}


class GridWalkEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        r = random.Random(seed)
        self.p = p = r.randrange(9)
        self.g = r.choice([g for g in range(9) if abs(g - p) not in (0, 1, 3) and g + p != 8])
        self.e, self.turn_count, self.done = r.choices(list(D), k=3), 0, False
        return self.obs(), {}

    def obs(self):
        s = "".join("P" if i == self.p else "G" if i == self.g else "." for i in range(9))
        e = self.e[self.turn_count % 3]
        return f"You are P; reach G:\n{s[:3]}\n{s[3:6]}\n{s[6:]}\nReply \\boxed{{{e}}} (up/down/left/right)."

    def step(self, action):
        if self.done:
            return "Game over.", 0.0, True, False, {}
        self.turn_count += 1
        d, p = D.get((re.findall(r"\\boxed\{(.*?)\}", str(action)) + [""])[0].strip().lower(), 0), self.p
        self.p += d if ((p + d) // 3 == p // 3 if d % 3 else 0 <= p + d < 9) else 0
        win = self.p == self.g
        self.done = win or self.turn_count >= self.max_turns
        return "You win!" if win else self.obs(), float(win), win, self.done and not win, {}

    def solution(self):
        dy, dx = self.g // 3 - self.p // 3, self.g % 3 - self.p % 3
        return ["down"] * dy + ["up"] * -dy + ["right"] * dx + ["left"] * -dx
