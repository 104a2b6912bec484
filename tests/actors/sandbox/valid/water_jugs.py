"""Water jugs: measure an exact amount with two unmarked jugs.

Valid-environment fixture. Jug capacities a and b and a target t are drawn so
that t is a multiple of gcd(a, b) (Bezout) and the shortest solution takes 3 to
8 operations. Success is either jug holding exactly t litres.
Actions: \\boxed{fill A}, \\boxed{empty B}, \\boxed{pour A B}.
"""
import math
import random
import re
from collections import deque

BOXED = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)
OPERATIONS = ["fill A", "fill B", "empty A", "empty B", "pour A B", "pour B A"]


class WaterJugEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        while True:
            self.caps = (rng.randint(3, 9), rng.randint(4, 13))
            self.target = rng.randint(1, max(self.caps) - 1)
            self.jugs = (0, 0)
            if self.target % math.gcd(*self.caps) == 0 and 3 <= len(self._plan()) <= 8:
                break
        self.turn_count = 0
        self.done = False
        return self._observation(f"Measure exactly {self.target} litres."), {}

    def _apply(self, jugs, operation):
        verb, jug = operation.split()[:2]
        amounts, a = list(jugs), "AB".index(jug)
        b = 1 - a
        if verb == "fill":
            amounts[a] = self.caps[a]
        elif verb == "empty":
            amounts[a] = 0
        else:
            moved = min(amounts[a], self.caps[b] - amounts[b])
            amounts[a], amounts[b] = amounts[a] - moved, amounts[b] + moved
        return tuple(amounts)

    def _plan(self):
        parents, queue = {self.jugs: None}, deque([self.jugs])
        while queue:
            jugs = queue.popleft()
            if self.target in jugs:
                ops = []
                while parents[jugs] is not None:
                    jugs, op = parents[jugs]
                    ops.append(op)
                return ops[::-1]
            for op in OPERATIONS:
                nxt = self._apply(jugs, op)
                if nxt not in parents:
                    parents[nxt] = (jugs, op)
                    queue.append(nxt)
        return []

    def _observation(self, message):
        return (
            f"{message}\nJug A: {self.jugs[0]}/{self.caps[0]} L, jug B: {self.jugs[1]}/{self.caps[1]} L. "
            f"Goal: either jug holds {self.target} L. Turn {self.turn_count}/{self.max_turns}.\n"
            "Actions: \\boxed{fill A}, \\boxed{empty A}, \\boxed{pour A B} (pour A into B until A is "
            "empty or B is full), and the same with B."
        )

    def step(self, action):
        if self.done:
            return self._observation("The game is over; call reset()."), 0.0, True, False, {}
        self.turn_count += 1
        match = BOXED.search(str(action))
        command = " ".join((match.group(1) if match else str(action)).split()).lower()
        chosen = [op for op in OPERATIONS if op.lower() == command]
        if chosen:
            self.jugs = self._apply(self.jugs, chosen[0])
            if self.target in self.jugs:
                self.done = True
                return self._observation(f"Exactly {self.target} litres. You win!"), 1.0, True, False, {}
            message = f"Done: {chosen[0]}."
        else:
            message = "Unrecognised action. Use fill/empty with A or B, or pour A B / pour B A."
        truncated = self.turn_count >= self.max_turns
        self.done = truncated
        return self._observation(message), 0.0, False, truncated, {}

    def solution(self):
        return self._plan()
