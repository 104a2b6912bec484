"""Find which of three buttons lights the lamp, then name it."""
import random
import re


class LampButtonEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        r = random.Random(seed)
        self.w, self.e = r.choice("ABC"), r.choices("ABC", k=2)
        self.turn_count, self.done = 0, False
        return self.obs("One of buttons A, B, C is wired to the lamp."), {}

    def obs(self, msg):
        p, q = f"\\boxed{{press {self.e[0]}}} tests a button", f"\\boxed{{answer {self.e[1]}}} names the wired one"
        return f"{msg} Actions: {'; '.join((q, p) if self.turn_count else (p, q))}. A, B or C; a wrong answer loses."

    def step(self, action):
        if self.done:
            return "Game over.", 0.0, True, False, {}
        self.turn_count += 1
        a = (re.findall(r"\\boxed\{(.*?)\}", str(action)) + [""])[0].strip().upper()
        m = re.fullmatch(r"(PRESS|ANSWER) *([ABC])", a)
        if m and m[1] == "ANSWER":
            self.done, win = True, m[2] == self.w
            return ("Correct! You win." if win else "Wrong. You lose."), float(win), True, False, {}
        msg = ("The lamp lights up!" if m[2] == self.w else "The lamp stays dark.") if m else "Bad action."
        self.done = self.turn_count >= self.max_turns
        return self.obs(msg), 0.0, False, self.done, {}

    def solution(self):
        return ["press " + self.w, "answer " + self.w]
