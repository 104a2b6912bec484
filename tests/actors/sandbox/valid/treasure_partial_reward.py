"""Treasure dig: find three buried chests on a 4x4 field.

Valid-environment fixture with partial-progress rewards: each newly found chest
pays 1/3 (not terminal) and the last one pays 1.0 and ends the episode. A miss
reports the Manhattan distance to the nearest chest still buried.
Actions: \\boxed{dig R C} with R, C in 0-3.
"""
import random
import re

BOXED = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)
SIZE = 4


class TreasureDigEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        cells = [(r, c) for r in range(SIZE) for c in range(SIZE)]
        self.chests = rng.sample(cells, 3)
        self.found = []
        self.dug = {}
        self.start_clue = rng.choice(self.chests)[0]
        self.turn_count = 0
        self.done = False
        return self._observation(f"Three chests are buried; a map fragment says one is in row {self.start_clue}."), {}

    def _observation(self, message):
        grid = []
        for r in range(SIZE):
            grid.append(" ".join(self.dug.get((r, c), ".") for c in range(SIZE)))
        return (
            f"{message}\nField (row 0 at top; $ = chest, digits = distance clue):\n" + "\n".join(grid)
            + f"\nChests found {len(self.found)}/3. Turn {self.turn_count}/{self.max_turns}.\n"
            "Action: \\boxed{dig R C} digs row R, column C (0-3)."
        )

    def step(self, action):
        if self.done:
            return self._observation("The game is over; call reset()."), 0.0, True, False, {}
        self.turn_count += 1
        match = BOXED.search(str(action))
        command = (match.group(1) if match else str(action)).strip().lower()
        dig = re.fullmatch(r"dig\s*\(?\s*([0-3])\s*[, ]\s*([0-3])\s*\)?", command)
        reward = 0.0
        if not dig:
            message = "Unrecognised action. Example: \\boxed{dig 2 1}."
        else:
            cell = (int(dig.group(1)), int(dig.group(2)))
            if cell in self.chests and cell not in self.found:
                self.found.append(cell)
                self.dug[cell] = "$"
                if len(self.found) == 3:
                    self.done = True
                    return self._observation("All three chests found. You win!"), 1.0, True, False, {}
                reward = 1.0 / 3.0
                message = f"A chest at {cell}!"
            elif cell in self.dug:
                message = "Already dug there."
            else:
                left = [ch for ch in self.chests if ch not in self.found]
                distance = min(abs(cell[0] - r) + abs(cell[1] - c) for r, c in left)
                self.dug[cell] = str(distance)
                message = f"Nothing at {cell}; the nearest buried chest is {distance} steps away."
        truncated = self.turn_count >= self.max_turns
        self.done = truncated
        return self._observation(message), reward, False, truncated, {}

    def solution(self):
        return [f"dig {r} {c}" for r, c in self.chests if (r, c) not in self.found]
