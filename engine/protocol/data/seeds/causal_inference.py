"""Switchboard: find the two switches that cause the lamp to light.

Causal Inference seed environment. Six switches start in random positions.
The lamp is wired to exactly two of them and lights only while both of those
are ON; the other four do nothing. The player intervenes on the switches,
watches the lamp, and then names the two causes. A wrong answer ends the game.
Actions: \\boxed{set 101100} (one digit per switch, 1 = ON), \\boxed{flip K},
\\boxed{answer J K}.
"""
import random
import re

BOXED = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)
COUNT = 6


class SwitchboardEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.causes = sorted(self.rng.sample(range(COUNT), 2))
        self.switches = [self.rng.random() < 0.5 for _ in range(COUNT)]
        self.turn_count = 0
        self.done = False
        return self._observation("Two hidden switches control the lamp."), {}

    def _lamp(self):
        return all(self.switches[i] for i in self.causes)

    def _observation(self, message):
        board = " ".join(f"{i + 1}:{'ON' if on else 'off'}" for i, on in enumerate(self.switches))
        return (
            f"{message}\nSwitches {board}. The lamp is {'LIT' if self._lamp() else 'dark'}.\n"
            f"Turn {self.turn_count}/{self.max_turns}. Actions: \\boxed{{set 110000}} sets all six switches "
            "(1 = ON); \\boxed{flip K} toggles switch K; \\boxed{answer J K} names the two causes "
            "(a wrong answer loses). Reply with one action in \\boxed{...}."
        )

    def step(self, action):
        if self.done:
            return self._observation("The game is over; call reset()."), 0.0, True, False, {}
        self.turn_count += 1
        text = str(action)
        match = BOXED.search(text)
        command = (match.group(1) if match else text).strip().lower()
        setting = re.fullmatch(r"set\s*([01]{%d})" % COUNT, command)
        flip = re.fullmatch(r"flip\s*([1-6])", command)
        answer = re.fullmatch(r"answer\s*([1-6])\s*(?:,|and)?\s*([1-6])", command)
        if setting:
            self.switches = [bit == "1" for bit in setting.group(1)]
            message = "Switches set."
        elif flip:
            k = int(flip.group(1)) - 1
            self.switches[k] = not self.switches[k]
            message = f"Switch {k + 1} flipped."
        elif answer:
            self.done = True
            named = sorted(int(g) - 1 for g in answer.groups())
            truth = f"{self.causes[0] + 1} and {self.causes[1] + 1}"
            if named == self.causes:
                return self._observation(f"Correct: switches {truth}. You win!"), 1.0, True, False, {}
            return self._observation(f"Wrong: the causes were {truth}. You lose."), 0.0, True, False, {}
        else:
            message = "Unrecognised action. Try \\boxed{set 111111}, \\boxed{flip 3} or \\boxed{answer 2 5}."
        truncated = self.turn_count >= self.max_turns
        self.done = truncated
        return self._observation(message + (" Out of turns." if truncated else "")), 0.0, False, truncated, {}

    def solution(self):
        """Switch everything on except one switch at a time; the lamp goes dark only for a cause."""
        actions, found = [], []
        for i in range(COUNT):
            if len(found) == 2:
                break
            actions.append("set " + "".join("0" if j == i else "1" for j in range(COUNT)))
            if i in self.causes:
                found.append(i + 1)
        return actions + [f"answer {found[0]} {found[1]}"]
