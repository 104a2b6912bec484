"""Letter swap: unscramble a word by swapping pairs of letters.

Valid-environment fixture about string manipulation. The target word and a
scrambled copy are shown; each turn the player swaps two positions. The
scramble needs at least two swaps. Positions are numbered from 1.
Actions: \\boxed{swap I J}.
"""
import random
import re

BOXED = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)
WORDS = ["planet", "garden", "silver", "python", "marble", "frozen", "candle", "bright", "timber", "vortex"]


class LetterSwapEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.target = rng.choice(WORDS)
        while True:
            letters = list(self.target)
            rng.shuffle(letters)
            self.current = "".join(letters)
            if len(self._plan()) >= 2:
                break
        self.turn_count = 0
        self.done = False
        return self._observation("Unscramble the word."), {}

    def _plan(self):
        """Selection-sort swaps turning current into target (minimal: words have distinct letters)."""
        letters, swaps = list(self.current), []
        for i, wanted in enumerate(self.target):
            if letters[i] != wanted:
                j = letters.index(wanted, i + 1)
                letters[i], letters[j] = letters[j], letters[i]
                swaps.append(f"swap {i + 1} {j + 1}")
        return swaps

    def _observation(self, message):
        numbered = " ".join(f"{i + 1}:{ch}" for i, ch in enumerate(self.current))
        return (
            f"{message}\nCurrent: {self.current.upper()}  ({numbered})\nTarget:  {self.target.upper()}\n"
            f"Turn {self.turn_count}/{self.max_turns}. Action: \\boxed{{swap I J}} exchanges the letters "
            f"at positions I and J (1-{len(self.target)})."
        )

    def step(self, action):
        if self.done:
            return self._observation("The game is over; call reset()."), 0.0, True, False, {}
        self.turn_count += 1
        match = BOXED.search(str(action))
        command = (match.group(1) if match else str(action)).strip().lower()
        swap = re.fullmatch(r"swap\s*(\d{1,2})\s*[, ]\s*(\d{1,2})", command)
        n = len(self.target)
        if swap and all(1 <= int(g) <= n for g in swap.groups()) and swap.group(1) != swap.group(2):
            i, j = int(swap.group(1)) - 1, int(swap.group(2)) - 1
            letters = list(self.current)
            letters[i], letters[j] = letters[j], letters[i]
            self.current = "".join(letters)
            if self.current == self.target:
                self.done = True
                return self._observation(f"{self.target.upper()} restored. You win!"), 1.0, True, False, {}
            message = f"Swapped positions {i + 1} and {j + 1}."
        else:
            message = f"Unrecognised action. Use \\boxed{{swap I J}} with two different positions 1-{n}."
        truncated = self.turn_count >= self.max_turns
        self.done = truncated
        return self._observation(message), 0.0, False, truncated, {}

    def solution(self):
        return self._plan()
