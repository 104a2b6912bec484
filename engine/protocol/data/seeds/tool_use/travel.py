"""Tool-use seed (domain: travel; variant: irrelevant request to decline): book a flight and a hotel, decline a poem."""


class TravelEnv(ToolUseBaseEnv):
    CITIES = ["Lisbon", "Oslo", "Rome", "Vienna", "Dublin"]
    CABINS = ["economy", "premium", "business"]

    def __init__(self, max_turns=25, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)

    def reset(self, seed=None):
        super().reset(seed)
        rng = self.rng
        origin, destination = rng.sample(self.CITIES, 2)
        flights = {}
        for i in range(6):
            flights[f"FL{200 + i}"] = {"origin": origin if i % 3 else rng.choice(self.CITIES), "destination": destination,
                                       "cabin": self.CABINS[i % 3], "price": rng.randint(80, 600)}
        self._state = {"flights": flights, "bookings": [], "hotels": [], "declined": False}
        cabin = rng.choice(self.CABINS)
        matching = sorted((f["price"], k) for k, f in flights.items()
                          if (f["origin"], f["destination"], f["cabin"]) == (origin, destination, cabin))
        if not matching:
            flights["FL299"] = {"origin": origin, "destination": destination, "cabin": cabin, "price": 333}
            matching = [(333, "FL299")]
        best = matching[0][1]
        passenger, nights, stars = rng.choice(["Ines Duarte", "Omar Haddad", "Lea Berg"]), rng.randint(2, 5), rng.choice(["3", "4", "5"])
        self._plan = [("search_flights", {"origin": origin, "destination": destination, "cabin": cabin}),
                      ("book_flight", {"flight_id": best, "passenger": passenger}),
                      ("book_hotel", {"city": destination, "nights": nights, "stars": stars}),
                      ("decline_request", {"reason": "writing poems is outside what I can do here"})]
        self._tools = {
            "search_flights": {"description": "Flights between two cities in one cabin, with prices.", "parameters": {
                "type": "object", "properties": {"origin": {"type": "string"}, "destination": {"type": "string"},
                                                 "cabin": {"type": "string", "enum": self.CABINS}},
                "required": ["origin", "destination", "cabin"]}},
            "book_flight": {"description": "Book a flight by id for a passenger.", "parameters": {
                "type": "object", "properties": {"flight_id": {"type": "string"}, "passenger": {"type": "string"}},
                "required": ["flight_id", "passenger"]}},
            "book_hotel": {"description": "Book a hotel.", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}, "nights": {"type": "integer"},
                                                 "stars": {"type": "string", "enum": ["3", "4", "5"]}},
                "required": ["city", "nights", "stars"]}},
            "decline_request": {"description": "Decline a request that no tool can serve.", "parameters": {
                "type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"]}},
            "get_news": {"description": "Headlines on a topic.", "parameters": {
                "type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}},
        }
        self._user_messages = [
            f"Book the cheapest {cabin} flight from {origin} to {destination} for {passenger}.",
            f"Also book a {stars}-star hotel in {destination} for {nights} nights.",
            "And write me a short poem about the sea for the trip.",
        ]
        self._message_criteria = [
            lambda s: [best, passenger] in s["bookings"],
            lambda s: [destination, nights, stars] in s["hotels"],
            lambda s: s["declined"],
        ]
        self._current_msg, self._expected_answer = 0, "done"
        return self._user_messages[0], {}

    def tool_search_flights(self, origin, destination, cabin):
        found = [f"{k}: {f['origin']} -> {f['destination']}, {f['cabin']}, ${f['price']}"
                 for k, f in sorted(self._state["flights"].items())
                 if (f["origin"], f["destination"], f["cabin"]) == (origin, destination, cabin)]
        return "\n".join(found) or "No flights found."

    def tool_book_flight(self, flight_id, passenger):
        if flight_id not in self._state["flights"]:
            return f"Error: no flight {flight_id}"
        self._state["bookings"].append([flight_id, str(passenger)])
        return f"Booked {flight_id} for {passenger}."

    def tool_book_hotel(self, city, nights, stars):
        self._state["hotels"].append([str(city), int(nights), str(stars)])
        return f"Booked a {stars}-star hotel in {city} for {int(nights)} nights."

    def tool_decline_request(self, reason):
        self._state["declined"] = True
        return "Request declined."

    def tool_get_news(self, topic):
        return f"No headlines about {topic} today."

    def solution(self):
        return list(self._plan) + ["done"]
