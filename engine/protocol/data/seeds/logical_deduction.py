"""Knights and knaves: deduce which islanders always lie.

Logical Deduction seed environment. Three islanders (names vary per episode)
are each a knight (every statement true) or a knave (every statement false).
Asking an islander reveals one statement; exactly one assignment of types fits
all three. One wrong answer ends the game.
Actions: \\boxed{ask NAME}, or \\boxed{answer KNK} giving the islanders' types
in the order listed (K = knight, N = knave).
"""
import itertools
import random
import re

BOXED = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)
NAME_POOL = ["Ada", "Bram", "Cleo", "Dov", "Esme", "Finn", "Gus", "Hana", "Ivo", "Juno", "Lars", "Mira"]
WORLDS = list(itertools.product([True, False], repeat=3))


class KnightsKnavesEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.names = self.rng.sample(NAME_POOL, 3)
        while True:
            self.truth = self.rng.choice(WORLDS)
            self.statements = [self._pick_statement(s) for s in range(3)]
            fits = [w for w in WORLDS if all(f(w) == w[s] for s, (_, f) in enumerate(self.statements))]
            if fits == [self.truth]:
                break
        self.heard = set()
        self.turn_count = 0
        self.done = False
        return self._observation(f"You meet three islanders: {', '.join(self.names)}."), {}

    def _pick_statement(self, speaker):
        x, y = [i for i in range(3) if i != speaker]
        a, b = self.names[x], self.names[y]
        options = [
            (f"{a} is a knight.", lambda w: w[x]),
            (f"{a} is a knave.", lambda w: not w[x]),
            (f"{b} is a knight.", lambda w: w[y]),
            (f"{b} is a knave.", lambda w: not w[y]),
            (f"{a} and {b} are the same kind.", lambda w: w[x] == w[y]),
            (f"{a} and {b} are different kinds.", lambda w: w[x] != w[y]),
            (f"{a} or {b} is a knight.", lambda w: w[x] or w[y]),
            (f"{b} and I are the same kind.", lambda w: w[y] == w[speaker]),
            ("Exactly one of us three is a knight.", lambda w: sum(w) == 1),
            ("At least two of us three are knaves.", lambda w: sum(w) <= 1),
            ("Exactly two of us three are knights.", lambda w: sum(w) == 2),
        ]
        honest = self.truth[speaker]
        return self.rng.choice([o for o in options if o[1](self.truth) == honest])

    def _observation(self, message):
        lines = [f'{self.names[s]} says: "{self.statements[s][0]}"' for s in sorted(self.heard)]
        return (
            f"{message}\nKnights always tell the truth; knaves always lie.\n"
            + ("\n".join(lines) or "Nobody has spoken yet.")
            + f"\nTurn {self.turn_count}/{self.max_turns}. Actions: \\boxed{{ask {self.names[0]}}} hears a "
            "statement; \\boxed{answer KNK} names the types in the order listed (K = knight, N = knave). "
            "A wrong answer loses. Reply with one action in \\boxed{...}."
        )

    def step(self, action):
        if self.done:
            return self._observation("The game is over; call reset()."), 0.0, True, False, {}
        self.turn_count += 1
        text = str(action)
        match = BOXED.search(text)
        command = (match.group(1) if match else text).strip().upper()
        ask = re.fullmatch(r"ASK\s+(\w+)", command)
        answer = re.fullmatch(r"ANSWER\s*([KN])\W*([KN])\W*([KN])", command)
        who = [i for i, n in enumerate(self.names) if ask and ask.group(1) in (n.upper(), n[0])]
        if who:
            self.heard.add(who[0])
            message = f"{self.names[who[0]]} has spoken."
        elif answer:
            self.done = True
            claimed = tuple(letter == "K" for letter in answer.groups())
            key = "".join("K" if t else "N" for t in self.truth)
            if claimed == self.truth:
                return self._observation(f"Correct ({key}). You win!"), 1.0, True, False, {}
            return self._observation(f"Wrong; the types were {key}. You lose."), 0.0, True, False, {}
        else:
            message = f"Unrecognised action. Try \\boxed{{ask {self.names[1]}}} or \\boxed{{answer KNN}}."
        truncated = self.turn_count >= self.max_turns
        self.done = truncated
        return self._observation(message + (" Out of turns." if truncated else "")), 0.0, False, truncated, {}

    def solution(self):
        key = "".join("K" if t else "N" for t in self.truth)
        return [f"ask {name}" for name in self.names] + [f"answer {key}"]
