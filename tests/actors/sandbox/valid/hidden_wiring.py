"""Hidden wiring: three switches are secretly wired to three lamps; light the lamps in the order asked.

Valid-environment fixture for hidden information. The first observation is the same text for every seed: the
wiring (a permutation drawn from the seed) is what the player must uncover by flipping switches, so only the
play differs between seeds. The reference accepts such games; so must the validator (`seeds_differ` notes it).
Actions: \\boxed{flip 1}, \\boxed{flip 2}, \\boxed{flip 3}, \\boxed{reset}.
"""
import random
import re

BOXED = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)
LAMPS = ("red", "green", "blue")


class HiddenWiringEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.wiring = list(LAMPS)
        rng.shuffle(self.wiring)  # switch i lights lamp self.wiring[i]
        self.lit = []
        self.turn_count = 0
        self.done = False
        return self._observation("Three switches, three dark lamps."), {}

    def _observation(self, message):
        lit = ", ".join(self.lit) if self.lit else "none"
        return (
            f"{message} Light the lamps in the order red, green, blue. Lit so far: {lit}. "
            f"Turn {self.turn_count}/{self.max_turns}.\n"
            "Actions: \\boxed{flip 1}, \\boxed{flip 2}, \\boxed{flip 3} (light the lamp a switch is wired to), "
            "\\boxed{reset} (all lamps off)."
        )

    def step(self, action):
        if self.done:
            return self._observation("The game is over."), 0.0, True, False, {}
        self.turn_count += 1
        match = BOXED.search(str(action))
        command = " ".join((match.group(1) if match else str(action)).split()).lower()
        reward, terminated = 0.0, False
        if command == "reset":
            self.lit = []
            message = "All lamps are off again."
        elif command in ("flip 1", "flip 2", "flip 3"):
            lamp = self.wiring[int(command[-1]) - 1]
            if lamp in self.lit:
                message = f"The {lamp} lamp is already lit."
            else:
                self.lit.append(lamp)
                message = f"The {lamp} lamp lights up."
                if self.lit == list(LAMPS):
                    reward, terminated, message = 1.0, True, "All lamps lit in order: you win!"
                elif len(self.lit) == 3:
                    terminated, message = True, "All lamps lit, but out of order: you lose."
        else:
            message = "Unknown action: answer as \\boxed{flip N} or \\boxed{reset}."
        truncated = not terminated and self.turn_count >= self.max_turns
        self.done = terminated or truncated
        return self._observation(message), reward, terminated, truncated, {}

    def solution(self):
        return [f"flip {self.wiring.index(lamp) + 1}" for lamp in LAMPS]

    def close(self):
        pass
