"""Metro route: reach the destination along a fastest route in a small graph.

Valid-environment fixture with a small weighted graph search (Dijkstra with
heapq). Seven stations are joined by tracks with travel times; the player rides
one track per turn. Arriving wins only if the total time equals the fastest
possible; a ride after which that time is out of reach loses.
Actions: \\boxed{go STATION}.
"""
import heapq
import random
import re

BOXED = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)
STATIONS = ["Ash", "Birch", "Cedar", "Elm", "Fir", "Hazel", "Larch", "Maple", "Oak", "Pine", "Rowan", "Yew"]


class MetroRouteEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        while True:
            names = rng.sample(STATIONS, 7)
            self.tracks = {name: {} for name in names}
            for i in range(1, 7):  # a random spanning tree keeps the map connected
                self._link(names[i], names[rng.randrange(i)], rng.randint(2, 9))
            for _ in range(4):
                a, b = rng.sample(names, 2)
                self._link(a, b, rng.randint(2, 9))
            self.here, self.goal = names[0], names[-1]
            route, self.best = self._fastest(self.here)
            if len(route) >= 3:
                break
        self.elapsed = 0
        self.turn_count = 0
        self.done = False
        return self._observation(f"Travel from {self.here} to {self.goal} as fast as possible."), {}

    def _link(self, a, b, minutes):
        self.tracks[a][b] = self.tracks[b][a] = min(minutes, self.tracks[a].get(b, minutes))

    def _fastest(self, start):
        """(list of stations after start, total minutes) of a fastest route to the goal."""
        queue, seen = [(0, start, [])], set()
        while queue:
            minutes, station, path = heapq.heappop(queue)
            if station == self.goal:
                return path, minutes
            if station in seen:
                continue
            seen.add(station)
            for nxt, cost in sorted(self.tracks[station].items()):
                if nxt not in seen:
                    heapq.heappush(queue, (minutes + cost, nxt, path + [nxt]))
        return [], 0

    def _observation(self, message):
        lines = sorted(f"{a}-{b} {m}min" for a in self.tracks for b, m in self.tracks[a].items() if a < b)
        exits = ", ".join(f"{b} ({m} min)" for b, m in sorted(self.tracks[self.here].items()))
        return (
            f"{message}\nTracks: {'; '.join(lines)}.\nYou are at {self.here} after {self.elapsed} min; "
            f"destination {self.goal}. From here: {exits}.\nTurn {self.turn_count}/{self.max_turns}. "
            "Action: \\boxed{go STATION} rides one track; only a fastest route wins."
        )

    def step(self, action):
        if self.done:
            return self._observation("The game is over; call reset()."), 0.0, True, False, {}
        self.turn_count += 1
        match = BOXED.search(str(action))
        command = (match.group(1) if match else str(action)).strip()
        go = re.fullmatch(r"(?i:go(?: to)?)\s+([A-Za-z]+)", command)
        station = go.group(1).capitalize() if go else ""
        if station in self.tracks[self.here]:
            self.elapsed += self.tracks[self.here][station]
            self.here = station
            if self.elapsed + self._fastest(self.here)[1] > self.best:
                self.done = True
                return self._observation(f"No route from here beats {self.best} min. You lose."), 0.0, True, False, {}
            if self.here == self.goal:
                self.done = True
                return self._observation(f"Arrived in {self.elapsed} min, a fastest route. You win!"), 1.0, True, False, {}
            message = f"Rode to {station}."
        else:
            message = "Unrecognised action or no direct track. Use \\boxed{go NAME} with a neighbouring station."
        truncated = self.turn_count >= self.max_turns
        self.done = truncated
        return self._observation(message), 0.0, False, truncated, {}

    def solution(self):
        return [f"go {station}" for station in self._fastest(self.here)[0]]
