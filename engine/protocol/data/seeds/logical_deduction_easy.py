"""Two height clues order three people; name the tallest or shortest in one try."""
import random
import re


class TallestEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        r = random.Random(seed)
        p = r.sample("Ann Bob Cal Dan Eve Fay".split(), 3)
        c = [f"{p[0]} is taller than {p[1]}.", f"{p[1]} is taller than {p[2]}."]
        r.shuffle(c)
        q, self.ans = r.choice([("tallest", p[0]), ("shortest", p[-1])])
        self.names, e = sorted(p), r.choice(p)
        self.text = " ".join(c) + f" Who is {q}? Options: {', '.join(self.names)}. One try. Answer as \\boxed{{{e}}}."
        self.turn_count, self.done = 0, False
        return self.text, {}

    def step(self, action):
        if self.done:
            return "Game over.", 0.0, True, False, {}
        self.turn_count += 1
        m = re.search(r"\\boxed\{(.*?)\}", str(action))
        a = m.group(1).strip().title() if m else ""
        if a in self.names:
            self.done, win = True, a == self.ans
            return ("Correct! You win." if win else "Wrong. You lose."), float(win), True, False, {}
        self.done = self.turn_count >= self.max_turns
        return "Reply with one option. " + self.text, 0.0, False, self.done, {}

    def solution(self):
        return [self.ans]
