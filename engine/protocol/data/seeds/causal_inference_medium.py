"""Find which of four switches powers the lamp."""
import random
import re


class LampSwitchEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        r = random.Random(seed)
        self.w, self.e, self.k = r.randrange(4), f"{r.randrange(16):04b}", r.randint(1, 4)
        self.turn_count, self.done = 0, False
        return self.obs("One of switches 1-4 powers the lamp."), {}

    def obs(self, msg):
        s, k = f"\\boxed{{set {self.e}}} to set switches 1-4 (1=on)", f"\\boxed{{answer {self.k}}} to name it"
        return f"{msg} Use {' or '.join((k, s) if self.turn_count else (s, k))}; a wrong answer loses."

    def step(self, action):
        if self.done:
            return "Game over.", 0.0, True, False, {}
        self.turn_count += 1
        a = (re.findall(r"\\boxed\{(.*?)\}", str(action)) + [""])[0].strip().lower()
        s, k = re.fullmatch(r"set *([01]{4})", a), re.fullmatch(r"answer *([1-4])", a)
        if k:
            self.done, win = True, int(k[1]) == self.w + 1
            return ("Correct! You win." if win else "Wrong. You lose."), float(win), True, False, {}
        msg = ("The lamp is ON." if s[1][self.w] == "1" else "The lamp is off.") if s else "Bad action."
        self.done = self.turn_count >= self.max_turns
        return self.obs(msg), 0.0, False, self.done, {}

    def solution(self):
        return ["set 1100", "set 1010", f"answer {self.w + 1}"]
