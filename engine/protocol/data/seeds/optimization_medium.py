"""Pick the two items worth most that fit the bag."""
import random
import re

P = "AB AC AD BC BD CD".split()


class PairPackEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        r = random.Random(seed)
        w, v = (dict(zip("ABCD", r.choices(range(1, k), k=4))) for k in (7, 10))
        cap = max(r.randint(5, 9), min(w[x] + w[y] for x, y in P))
        s = {x + y: v[x] + v[y] for x, y in P if w[x] + w[y] <= cap}
        self.ok, e = [p for p in s if s[p] == max(s.values())], r.choice(P)
        self.text = ("Items: " + ", ".join(f"{c} {w[c]}kg ${v[c]}" for c in "ABCD") + f". Bag holds {cap}kg. "
                     f"Pick two worth most; one try: \\boxed{{{e}}}.")
        self.turn_count, self.done = 0, False
        return self.text, {}

    def step(self, action):
        if self.done:
            return "Game over.", 0.0, True, False, {}
        self.turn_count += 1
        a = (re.findall(r"\\boxed\{(.*?)\}", str(action)) + [""])[0].upper()
        a = "".join(sorted(a.replace(" ", "")))
        if a in P:
            self.done, win = True, a in self.ok
            return "You win!" if win else "You lose.", float(win), True, False, {}
        self.done = self.turn_count >= self.max_turns
        return self.text, 0.0, False, self.done, {}

    def solution(self):
        return [self.ok[0]]
