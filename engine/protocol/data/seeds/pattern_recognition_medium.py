"""Pick the next number of a sequence; one try."""
import random
import re


class NextNumberEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        r = random.Random(seed)
        a, d, k = r.randint(1, 9), r.randint(2, 6), r.randrange(3)
        t = [[a + d * i, a * (d // 2 + 1) ** i, a + d * i + i * (i - 1) // 2][k] for i in range(5)]
        self.seq, self.ans = t[:4], t[4]
        self.opts = sorted(r.sample([t[4] + x for x in (-3, -2, -1, 1, 2, 3)], 4) + [t[4]])
        self.e = r.choice(self.opts)
        self.turn_count, self.done = 0, False
        return self.obs(""), {}

    def obs(self, msg):
        return (f"{msg}Sequence: {', '.join(map(str, self.seq))}, ? Options: {self.opts}. "
                f"One try. Answer as \\boxed{{{self.e}}}.")

    def step(self, action):
        if self.done:
            return "Game over.", 0.0, True, False, {}
        self.turn_count += 1
        a = (re.findall(r"\\boxed\{(.*?)\}", str(action)) + [""])[0].strip()
        if a in map(str, self.opts):
            self.done, win = True, a == str(self.ans)
            return ("Correct! You win." if win else "Wrong. You lose."), float(win), True, False, {}
        self.done = self.turn_count >= self.max_turns
        return self.obs("Pick an option. "), 0.0, False, self.done, {}

    def solution(self):
        return [str(self.ans)]
