"""Heavy coin: find the one heavier coin among nine with a balance scale.

Valid-environment fixture: the episode state is a dataclass nested inside the
environment class (so the module still has a single top-level class) and
reset() returns (observation, {}). Two weighings suffice (split into thirds);
at most three weighings are allowed and a wrong answer loses.
Actions: \\boxed{weigh 1 2 3 vs 4 5 6} and \\boxed{answer K}.
"""
import random
import re
from dataclasses import dataclass, field

BOXED = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)
COINS = 9


class HeavyCoinEnv:
    @dataclass
    class State:
        heavy: int
        weighings: list = field(default_factory=list)
        turn_count: int = 0
        done: bool = False

    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.label = rng.choice(["gold", "silver", "bronze", "copper", "tin"])
        self.state = self.State(heavy=rng.randint(1, COINS))
        return self._observation(f"One of nine {self.label} coins is heavier than the rest."), {}

    @property
    def turn_count(self):
        return self.state.turn_count

    def _observation(self, message):
        log = "; ".join(self.state.weighings) or "no weighings yet"
        return (
            f"{message}\nCoins are numbered 1-{COINS}. Weighings used {len(self.state.weighings)}/3: {log}.\n"
            f"Turn {self.state.turn_count}/{self.max_turns}. Actions: \\boxed{{weigh 1 2 vs 3 4}} "
            "(equal-size pans), \\boxed{answer K} names the heavy coin (a wrong answer loses)."
        )

    def step(self, action):
        s = self.state
        if s.done:
            return self._observation("The game is over; call reset()."), 0.0, True, False, {}
        s.turn_count += 1
        match = BOXED.search(str(action))
        command = (match.group(1) if match else str(action)).strip().lower()
        weigh = re.fullmatch(r"weigh\s+([\d\s,]+?)\s*vs\s*([\d\s,]+)", command)
        answer = re.fullmatch(r"answer\s*(\d{1,2})", command)
        if answer:
            s.done = True
            if int(answer.group(1)) == s.heavy:
                return self._observation(f"Coin {s.heavy} is the heavy one. You win!"), 1.0, True, False, {}
            return self._observation(f"Wrong: it was coin {s.heavy}. You lose."), 0.0, True, False, {}
        message = "Unrecognised action. Example: \\boxed{weigh 1 2 3 vs 4 5 6}."
        if weigh:
            left = [int(t) for t in re.findall(r"\d+", weigh.group(1))]
            right = [int(t) for t in re.findall(r"\d+", weigh.group(2))]
            coins = left + right
            if len(s.weighings) >= 3:
                message = "No weighings left; answer now."
            elif len(left) != len(right) or len(set(coins)) != len(coins) or not all(1 <= c <= COINS for c in coins):
                message = "Each pan needs the same number of distinct coins numbered 1-9."
            else:
                result = "left pan heavier" if s.heavy in left else "right pan heavier" if s.heavy in right else "balanced"
                s.weighings.append(f"{left} vs {right}: {result}")
                message = f"The scale reads: {result}."
        truncated = s.turn_count >= self.max_turns
        s.done = truncated
        return self._observation(message), 0.0, False, truncated, {}

    def solution(self):
        third = (self.state.heavy - 1) // 3  # which group of three holds the heavy coin
        return ["weigh 1 2 3 vs 4 5 6", f"weigh {3 * third + 1} vs {3 * third + 2}", f"answer {self.state.heavy}"]
