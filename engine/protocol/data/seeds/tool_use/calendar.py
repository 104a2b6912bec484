"""Tool-use seed (domain: calendar; variant: execute): schedule, move and cancel meetings."""


class CalendarEnv(ToolUseBaseEnv):
    DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday"]

    def __init__(self, max_turns=25, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)

    def reset(self, seed=None):
        super().reset(seed)
        rng = self.rng
        people = ["Ana", "Ben", "Chloe", "Dev", "Eli", "Fay", "Gus"]
        titles = ["Budget review", "Design sync", "Hiring panel", "Roadmap", "Retro", "Vendor call"]
        rng.shuffle(titles)
        events = {}
        for i, title in enumerate(titles[:4]):
            events[f"ev{i + 1}"] = {"title": title, "day": rng.choice(self.DAYS), "hour": rng.randint(9, 16),
                                    "attendees": sorted(rng.sample(people, 2))}
        self._state = {"events": events, "next_id": 5}
        new_title, new_day, new_hour = titles[4], rng.choice(self.DAYS), rng.randint(9, 16)
        guests = sorted(rng.sample(people, 2))
        move_id, move_day, move_hour = "ev2", rng.choice(self.DAYS), rng.randint(9, 16)
        while (move_day, move_hour) == (events[move_id]["day"], events[move_id]["hour"]):
            move_hour = 9 + (move_hour - 8) % 8
        cancel_id = "ev3"
        self._plan = [
            ("create_event", {"title": new_title, "day": new_day, "hour": new_hour, "attendees": guests}),
            ("list_events", {"day": events[move_id]["day"]}),
            ("move_event", {"event_id": move_id, "day": move_day, "hour": move_hour}),
            ("cancel_event", {"event_id": cancel_id}),
        ]
        day_enum = {"type": "string", "enum": self.DAYS}
        self._tools = {
            "list_events": {"description": "List the events on one weekday, with their ids.",
                            "parameters": {"type": "object", "properties": {"day": day_enum}, "required": ["day"]}},
            "create_event": {"description": "Create an event.", "parameters": {"type": "object", "properties": {
                "title": {"type": "string"}, "day": day_enum, "hour": {"type": "integer", "description": "9-17"},
                "attendees": {"type": "array", "items": {"type": "string"}}}, "required": ["title", "day", "hour"]}},
            "move_event": {"description": "Move an event to another day and hour.", "parameters": {
                "type": "object", "properties": {"event_id": {"type": "string"}, "day": day_enum,
                                                 "hour": {"type": "integer"}}, "required": ["event_id", "day", "hour"]}},
            "cancel_event": {"description": "Cancel an event by id.", "parameters": {
                "type": "object", "properties": {"event_id": {"type": "string"}}, "required": ["event_id"]}},
            "get_weather": {"description": "Today's weather in a city.", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        }
        moved = events[move_id]["title"]
        self._user_messages = [
            f"Schedule '{new_title}' on {new_day.title()} at {new_hour}:00 with {guests[0]} and {guests[1]}.",
            f"Move '{moved}' (it is on {events[move_id]['day'].title()}) to {move_day.title()} at {move_hour}:00.",
            f"Cancel the '{events[cancel_id]['title']}' event, please.",
        ]
        self._message_criteria = [
            lambda s: any(e["title"] == new_title and e["day"] == new_day and e["hour"] == new_hour
                          and sorted(e["attendees"]) == guests for e in s["events"].values()),
            lambda s: move_id in s["events"] and (s["events"][move_id]["day"], s["events"][move_id]["hour"])
            == (move_day, move_hour),
            lambda s: cancel_id not in s["events"],
        ]
        self._current_msg, self._expected_answer = 0, "done"
        return self._user_messages[0], {}

    def _day(self, day):
        day = str(day).strip().lower()
        if day not in self.DAYS:
            raise ValueError(f"day must be one of {self.DAYS}")
        return day

    def tool_list_events(self, day):
        day = self._day(day)
        found = [f"{k}: {e['title']} at {e['hour']}:00 with {', '.join(e['attendees'])}"
                 for k, e in sorted(self._state["events"].items()) if e["day"] == day]
        return "\n".join(found) or f"No events on {day}."

    def tool_create_event(self, title, day, hour, attendees=None):
        event_id = f"ev{self._state['next_id']}"
        self._state["next_id"] += 1
        self._state["events"][event_id] = {"title": str(title), "day": self._day(day), "hour": int(hour),
                                           "attendees": sorted(str(a) for a in (attendees or []))}
        return f"Created {event_id}: {title} on {day} at {int(hour)}:00."

    def tool_move_event(self, event_id, day, hour):
        if event_id not in self._state["events"]:
            return f"Error: no event {event_id}"
        event = self._state["events"][event_id]
        event["day"], event["hour"] = self._day(day), int(hour)
        return f"Moved {event_id} ({event['title']}) to {event['day']} at {event['hour']}:00."

    def tool_cancel_event(self, event_id):
        if self._state["events"].pop(event_id, None) is None:
            return f"Error: no event {event_id}"
        return f"Cancelled {event_id}."

    def tool_get_weather(self, city):
        return f"{city}: 18 C, light clouds."

    def solution(self):
        return list(self._plan) + ["done"]
