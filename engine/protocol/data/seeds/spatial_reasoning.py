"""Walled grid: steer a token around walls to a goal square.

Spatial Reasoning seed environment. A 5x5 map shows the player P, the goal G
and walls #. Each turn the player moves one square; bumping into a wall or
the edge wastes the turn. Every map is generated so that the goal is reachable
in 4 to 8 moves.
Actions: \\boxed{up}, \\boxed{down}, \\boxed{left} or \\boxed{right}.
"""
import collections
import random
import re

BOXED = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)
SIZE = 5
MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


class WalledGridEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        cells = [(r, c) for r in range(SIZE) for c in range(SIZE)]
        while True:
            self.walls = set(self.rng.sample(cells, 7))
            free = [cell for cell in cells if cell not in self.walls]
            self.pos, self.goal = self.rng.sample(free, 2)
            route = self._route()
            if route is not None and 4 <= len(route) <= 8:
                break
        self.turn_count = 0
        self.done = False
        return self._observation("Reach the goal square G."), {}

    def _route(self):
        """Shortest list of moves from the current position to the goal (BFS), or None."""
        parents = {self.pos: None}
        queue = collections.deque([self.pos])
        while queue:
            cell = queue.popleft()
            if cell == self.goal:
                path = []
                while parents[cell] is not None:
                    cell, move = parents[cell]
                    path.append(move)
                return path[::-1]
            for move, (dr, dc) in MOVES.items():
                nxt = (cell[0] + dr, cell[1] + dc)
                if self._open(nxt) and nxt not in parents:
                    parents[nxt] = (cell, move)
                    queue.append(nxt)
        return None

    def _open(self, cell):
        return 0 <= cell[0] < SIZE and 0 <= cell[1] < SIZE and cell not in self.walls

    def _observation(self, message):
        rows = []
        for r in range(SIZE):
            row = ["P" if (r, c) == self.pos else "G" if (r, c) == self.goal else
                   "#" if (r, c) in self.walls else "." for c in range(SIZE)]
            rows.append(" ".join(row))
        return (
            f"{message}\nMap (row 0 is the top):\n" + "\n".join(rows)
            + f"\nYou are at row {self.pos[0]}, column {self.pos[1]}. Turn {self.turn_count}/{self.max_turns}.\n"
            "Actions: \\boxed{up}, \\boxed{down}, \\boxed{left}, \\boxed{right} (one square per turn)."
        )

    def step(self, action):
        if self.done:
            return self._observation("The game is over; call reset()."), 0.0, True, False, {}
        self.turn_count += 1
        text = str(action)
        match = BOXED.search(text)
        command = (match.group(1) if match else text).strip().lower()
        if command in MOVES:
            dr, dc = MOVES[command]
            target = (self.pos[0] + dr, self.pos[1] + dc)
            if self._open(target):
                self.pos = target
                message = f"You moved {command}."
            else:
                message = f"Blocked: you cannot move {command} from here."
            if self.pos == self.goal:
                self.done = True
                return self._observation("You reached the goal. You win!"), 1.0, True, False, {}
        else:
            message = "Unrecognised action. Reply with one direction, e.g. \\boxed{left}."
        truncated = self.turn_count >= self.max_turns
        self.done = truncated
        return self._observation(message + (" Out of turns." if truncated else "")), 0.0, False, truncated, {}

    def solution(self):
        return self._route()
