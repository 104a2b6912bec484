"""A fixed puzzle: the same lock for every seed, opened by a three-digit code found from feedback.

Valid-environment fixture for an environment that ignores its seed: every seed plays the very same game. The
reference accepts it (the agent still has to work the code out); the validator must too, with a note.
Actions: \\boxed{DDD}, a three-digit guess.
"""
import re

BOXED = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)
CODE = "472"


class FixedLockEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        self.turn_count = 0
        self.done = False
        return self._observation("A lock with a three-digit code."), {}

    def _observation(self, message):
        return (
            f"{message} After each guess you learn how many digits are right and in place. "
            f"Turn {self.turn_count}/{self.max_turns}.\nAnswer with a guess as \\boxed{{DDD}}, e.g. \\boxed{{123}}."
        )

    def step(self, action):
        if self.done:
            return self._observation("The game is over."), 0.0, True, False, {}
        self.turn_count += 1
        match = BOXED.search(str(action))
        guess = (match.group(1) if match else str(action)).strip()
        reward, terminated = 0.0, False
        if len(guess) == 3 and guess.isdigit():
            right = sum(a == b for a, b in zip(guess, CODE))
            if right == 3:
                reward, terminated, message = 1.0, True, "The lock opens: you win!"
            else:
                message = f"{guess}: {right} digit(s) right and in place."
        else:
            message = "A guess is exactly three digits."
        truncated = not terminated and self.turn_count >= self.max_turns
        self.done = terminated or truncated
        return self._observation(message), reward, terminated, truncated, {}

    def solution(self):
        return ["400", "470", CODE]

    def close(self):
        pass
