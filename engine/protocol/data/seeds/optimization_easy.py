"""Carry one of three items: take the one worth the most; one try."""
import random
import re


class BestItemEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        r = random.Random(seed)
        self.v = dict(zip(r.sample(["gem", "coin", "ring", "cup", "hat"], 3), r.sample(range(1, 10), 3)))
        self.best, e = max(self.v, key=self.v.get), r.choice(sorted(self.v))
        items = ", ".join(f"{k} (worth {n})" for k, n in self.v.items())
        self.text = f"Items: {items}. You can carry only one. One try. Take an item as \\boxed{{{e}}}."
        self.turn_count, self.done = 0, False
        return self.text, {}

    def step(self, action):
        if self.done:
            return "Game over.", 0.0, True, False, {}
        self.turn_count += 1
        a = (re.findall(r"\\boxed\{(.*?)\}", str(action)) + [""])[0].strip().lower()
        if a in self.v:
            self.done, win = True, a == self.best
            msg = f"You took the {a}, worth {self.v[a]}. " + ("Best choice! You win." if win else "You lose.")
            return msg, float(win), True, False, {}
        self.done = self.turn_count >= self.max_turns
        return "Unknown item. " + self.text, 0.0, False, self.done, {}

    def solution(self):
        return [self.best]
