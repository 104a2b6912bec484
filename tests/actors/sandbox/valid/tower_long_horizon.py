"""Tower shuffle: gather four disks onto one peg, Tower-of-Hanoi rules.

Valid-environment fixture with a long horizon: the start is a random legal
arrangement of four disks on pegs A, B, C, chosen so that the shortest solution
takes 7 to 10 moves. A larger disk may never sit on a smaller one.
Actions: \\boxed{A C} moves the top disk of peg A onto peg C.
"""
import collections
import random
import re

BOXED = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)
PEGS = "ABC"
DISKS = 4


class TowerShuffleEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        while True:
            self.target = rng.choice(PEGS)
            # state[d] = peg of disk d (0 = smallest); any assignment is a legal stack.
            self.state = tuple(rng.choice(PEGS) for _ in range(DISKS))
            if 7 <= len(self._plan()) <= 10:
                break
        self.turn_count = 0
        self.done = False
        return self._observation(f"Move every disk onto peg {self.target}."), {}

    @staticmethod
    def _moves(state):
        for src in PEGS:
            for dst in PEGS:
                on_src = [d for d in range(DISKS) if state[d] == src]
                on_dst = [d for d in range(DISKS) if state[d] == dst]
                if src != dst and on_src and (not on_dst or min(on_src) < min(on_dst)):
                    disk = min(on_src)
                    yield f"{src} {dst}", state[:disk] + (dst,) + state[disk + 1:]

    def _plan(self):
        goal = (self.target,) * DISKS
        parents = {self.state: None}
        queue = collections.deque([self.state])
        while queue:
            state = queue.popleft()
            if state == goal:
                path = []
                while parents[state] is not None:
                    state, move = parents[state]
                    path.append(move)
                return path[::-1]
            for move, nxt in self._moves(state):
                if nxt not in parents:
                    parents[nxt] = (state, move)
                    queue.append(nxt)
        return []

    def _observation(self, message):
        pegs = [f"{p}: " + (" ".join(str(d + 1) for d in range(DISKS - 1, -1, -1) if self.state[d] == p) or "-")
                for p in PEGS]
        return (
            f"{message}\nPegs (bottom to top, 1 = smallest disk): " + " | ".join(pegs)
            + f"\nTurn {self.turn_count}/{self.max_turns}. Action: \\boxed{{A C}} moves the top disk of A onto C; "
            "a disk may only go onto an empty peg or a larger disk."
        )

    def step(self, action):
        if self.done:
            return self._observation("The game is over; call reset()."), 0.0, True, False, {}
        self.turn_count += 1
        match = BOXED.search(str(action))
        text = (match.group(1) if match else str(action)).strip().upper()
        pair = re.fullmatch(r"([ABC])\s*(?:->|TO|,)?\s*([ABC])", text)
        command = " ".join(pair.groups()) if pair else ""
        legal = dict(self._moves(self.state))
        if command in legal:
            self.state = legal[command]
            if self.state == (self.target,) * DISKS:
                self.done = True
                return self._observation("All disks gathered. You win!"), 1.0, True, False, {}
            message = f"Moved {command.replace(' ', ' -> ')}."
        else:
            message = "Illegal or unrecognised move. Name two pegs, e.g. \\boxed{B A}."
        truncated = self.turn_count >= self.max_turns
        self.done = truncated
        return self._observation(message), 0.0, False, truncated, {}

    def solution(self):
        return self._plan()
