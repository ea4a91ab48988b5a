"""ToolWorld domain: a team calendar (events with dates, times and attendees).

Tiers: 1 = one call with the event id (or the full new event) in the goal; 2 = find an event by
title, then act; 3 = move an event to the first free slot of another day; 4 = create an event
in the first free slot of another event's day and invite someone; 5 = move an event to the
first free slot of another event's day and invite someone to it.
"""

from __future__ import annotations

import datetime
import itertools
import random
import re

from lopd.chat import clip
from lopd.envs.toolworld.base import (
    NAMES,
    Check,
    Domain,
    Param,
    TaskSpec,
    ToolError,
    guard_others,
    pick,
    tool,
)

_DATES = [f"2025-03-{d:02d}" for d in (10, 11, 12, 13, 14)]
_TITLES = [
    "Team sync", "Design review", "Budget check", "Client call", "Sprint planning",
    "Hiring panel", "Lunch and learn", "Security audit", "Roadmap session", "One-on-one",
    "Vendor demo", "Retrospective", "Launch prep", "Board update", "Code review",
]
_DAY_START, _DAY_END = 9 * 60, 17 * 60
_LAST_MINUTE = 24 * 60 - 1  # 23:59: an event starts and ends within its day
_ID = Param("string", "Event id, e.g. 'EV-101'.")
_DATE = Param("string", "Date as YYYY-MM-DD.")
_TIME = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
_DATE_FORM = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def minutes(hhmm: str) -> int:
    match = _TIME.fullmatch(hhmm) if isinstance(hhmm, str) else None
    if not match:
        raise ToolError(f"bad time '{clip(str(hhmm))}' (use HH:MM, 24-hour)")
    return int(match.group(1)) * 60 + int(match.group(2))


def valid_date(date: str) -> str:
    """``date`` if it is a real calendar date written YYYY-MM-DD, else a ToolError."""
    if isinstance(date, str) and _DATE_FORM.fullmatch(date):
        try:
            datetime.date.fromisoformat(date)
            return date
        except ValueError:
            pass
    raise ToolError(f"bad date '{clip(str(date))}' (use YYYY-MM-DD)")


def hhmm(total: int) -> str:
    return f"{total // 60:02d}:{total % 60:02d}"


def free_slot(events: dict, date: str, duration: int, skip: str | None = None) -> str | None:
    busy = [(minutes(e["start"]), minutes(e["end"])) for k, e in events.items()
            if e["date"] == date and k != skip]
    for start in range(_DAY_START, _DAY_END - duration + 1, 30):
        if all(start + duration <= b or start >= e for b, e in busy):
            return hhmm(start)
    return None


class Calendar(Domain):
    name = "calendar"
    description = "a team calendar"
    example = ("list_events", {"date": "2025-03-10"})

    def _event(self, event_id: str) -> dict:
        return self._lookup("events", event_id, "event")

    def _check_free(self, date: str, start: int, end: int, skip: str | None = None) -> None:
        valid_date(date)
        if end <= start:
            raise ToolError("an event must end after it starts")
        if end > _LAST_MINUTE:
            raise ToolError(f"the event would end at {hhmm(end)}, after 23:59 (events stay "
                            "within one day)")
        for key, event in self.state["events"].items():
            if key != skip and event["date"] == date and \
                    start < minutes(event["end"]) and minutes(event["start"]) < end:
                raise ToolError(f"conflicts with {key} ({event['title']})")

    @tool("List the events on a date.", date=_DATE)
    def list_events(self, date: str) -> dict:
        valid_date(date)
        rows = [{"event_id": k, "title": e["title"], "start": e["start"], "end": e["end"]}
                for k, e in self.state["events"].items() if e["date"] == date]
        return {"date": date, "events": rows}

    @tool("Find events whose title contains the given text.",
          title=Param("string", "Event title or part of it."))
    def find_event(self, title: str) -> dict:
        rows = [{"event_id": k, **e} for k, e in self.state["events"].items()
                if title.lower() in e["title"].lower()]
        if not rows:
            raise ToolError(f"no event matches '{title}'")
        return {"events": rows}

    @tool("Find the earliest free slot of a given length on a date (working hours 09:00-17:00, "
          "half-hour steps).", date=_DATE,
          duration_minutes=Param("integer", "Length of the slot in minutes.", minimum=1,
                                 maximum=_LAST_MINUTE))
    def find_free_slot(self, date: str, duration_minutes: int) -> dict:
        valid_date(date)
        if duration_minutes <= 0:
            raise ToolError("duration must be positive")
        start = free_slot(self.state["events"], date, duration_minutes)
        if start is None:
            raise ToolError(f"no free slot of {duration_minutes} minutes on {date}")
        return {"date": date, "start": start, "end": hhmm(minutes(start) + duration_minutes)}

    @tool("Create an event.", title=Param("string", "Title of the event."), date=_DATE,
          start=Param("string", "Start time HH:MM."), end=Param("string", "End time HH:MM."))
    def create_event(self, title: str, date: str, start: str, end: str) -> dict:
        self._check_free(date, minutes(start), minutes(end))
        event_id = f"EV-{self.state['next_id']}"
        self.state["next_id"] += 1
        self.state["events"][event_id] = {"title": title, "date": date, "start": start,
                                          "end": end, "attendees": []}
        return {"event_id": event_id, **self.state["events"][event_id]}

    @tool("Move an event to a new date and start time (its length is kept).", event_id=_ID,
          date=_DATE, start=Param("string", "New start time HH:MM."))
    def move_event(self, event_id: str, date: str, start: str) -> dict:
        event = self._event(event_id)
        length = minutes(event["end"]) - minutes(event["start"])
        begin = minutes(start)
        self._check_free(date, begin, begin + length, skip=event_id)
        event.update(date=date, start=start, end=hhmm(begin + length))
        return {"event_id": event_id, **event}

    @tool("Cancel (delete) an event.", event_id=_ID)
    def cancel_event(self, event_id: str) -> dict:
        self._event(event_id)
        del self.state["events"][event_id]
        return {"event_id": event_id, "cancelled": True}

    def domain_problems(self) -> list[str]:
        problems, spans = [], []
        for key, event in self.state["events"].items():
            try:
                valid_date(event["date"])
                start, end = minutes(event["start"]), minutes(event["end"])
            except ToolError as err:
                problems.append(f"{key}: {err}")
                continue
            if end <= start:
                problems.append(f"{key}: ends at {event['end']}, not after {event['start']}")
            spans.append((event["date"], start, end, key))
        spans.sort()
        for (date, _, end, key), (other_date, start, _, other) in itertools.pairwise(spans):
            if date == other_date and start < end:
                problems.append(f"{key} and {other} overlap on {date}")
        return problems

    @tool("Add a person to an event's attendees.", event_id=_ID,
          name=Param("string", "Full name of the person."))
    def add_attendee(self, event_id: str, name: str) -> dict:
        event = self._event(event_id)
        if name in event["attendees"]:
            raise ToolError(f"{name} already attends {event_id}")
        event["attendees"].append(name)
        return {"event_id": event_id, "attendees": event["attendees"]}

    @staticmethod
    def generate(rng: random.Random, tier: int) -> TaskSpec:
        state = _make_state(rng)
        maker = {1: _tier12, 2: _tier12, 3: _tier3, 4: _tier45, 5: _tier45}[tier]
        return maker(rng, state, tier)


def _make_state(rng: random.Random) -> dict:
    titles = rng.sample(_TITLES, 9)
    events: dict[str, dict] = {}
    ids = iter(rng.sample(range(100, 199), 9))
    for index, title in enumerate(titles):
        date = _DATES[index % len(_DATES)]
        duration = rng.choice([30, 60, 90])
        options = [s for s in range(_DAY_START, _DAY_END - duration + 1, 30)
                   if all(s + duration <= minutes(e["start"]) or s >= minutes(e["end"])
                          for e in events.values() if e["date"] == date)]
        start = rng.choice(options)
        events[f"EV-{next(ids)}"] = {
            "title": title, "date": date, "start": hhmm(start), "end": hhmm(start + duration),
            "attendees": rng.sample(NAMES.people, rng.randrange(1, 4)),
        }
    return {"events": events, "next_id": 200}


def _guard(touched, allow_new=False):
    return guard_others("others_unchanged", "event", ("events",), touched, allow_new)


def _tier12(rng, state, tier):
    events = state["events"]
    event_id = rng.choice(sorted(events))
    event = events[event_id]
    who = f"event {event_id}" if tier == 1 else f"the '{event['title']}' event"
    action = rng.choice(["cancel", "invite", "create"] if tier == 1 else ["cancel", "invite"])
    if action == "cancel":
        goal = pick(rng, ["Cancel {w}.", "Please delete {w} from the calendar.",
                          "{W} is not happening any more; remove it."],
                    w=who, W=who[0].upper() + who[1:])
        checks = [Check("cancelled", f"{event_id} no longer exists", "missing",
                        ("events", event_id)), _guard([event_id])]
        call = ("cancel_event", {"event_id": event_id})
    elif action == "invite":
        person = rng.choice([p for p in NAMES.people if p not in event["attendees"]])
        goal = pick(rng, ["Add {p} to {w}.", "Invite {p} to {w}.", "{p} should attend {w}."],
                    p=person, w=who)
        checks = [Check("invited", f"{person} attends {event_id}", "eq",
                        ("events", event_id, "attendees"), [*event["attendees"], person]),
                  _guard([event_id])]
        call = ("add_attendee", {"event_id": event_id, "name": person})
    else:
        return _create_direct(rng, state, tier)
    calls = [call] if tier == 1 else [("find_event", {"title": event["title"]}), call]
    return TaskSpec(goal, state, checks, calls, tier)


def _create_direct(rng, state, tier):
    title = rng.choice([t for t in _TITLES if all(t != e["title"] for e in state["events"].values())])
    date = rng.choice(_DATES)
    duration = rng.choice([30, 60])
    start = free_slot(state["events"], date, duration)
    end = hhmm(minutes(start) + duration)
    goal = pick(rng, ["Create an event '{t}' on {d} from {s} to {e}.",
                      "Put '{t}' in the calendar on {d}, {s}-{e}.",
                      "Schedule '{t}' for {d} between {s} and {e}."],
                t=title, d=date, s=start, e=end)
    fields = {"title": title, "date": date, "start": start, "end": end}
    checks = [Check("created", f"an event '{title}' on {date} {start}-{end} exists", "match",
                    ("events",), fields),
              Check("one_new", "exactly one event was added", "count", ("events",),
                    len(state["events"]) + 1),
              _guard([], allow_new=True)]
    return TaskSpec(goal, state, checks, [("create_event", fields)], tier)


def _tier3(rng, state, tier):
    events = state["events"]
    event_id = rng.choice(sorted(events))
    event = events[event_id]
    date = rng.choice([d for d in _DATES if d != event["date"]])
    length = minutes(event["end"]) - minutes(event["start"])
    start = free_slot(events, date, length)
    goal = pick(rng, ["Move the '{t}' event to the earliest free time on {d}.",
                      "Reschedule '{t}' to {d}, at the first free slot that day.",
                      "'{t}' has to happen on {d} instead: put it in the earliest free slot."],
                t=event["title"], d=date)
    end = hhmm(minutes(start) + length)
    checks = [Check("moved", f"{event_id} is on {date} {start}-{end}", "eq",
                    ("events", event_id), {**event, "date": date, "start": start, "end": end}),
              _guard([event_id])]
    calls = [("find_event", {"title": event["title"]}),
             ("find_free_slot", {"date": date, "duration_minutes": length}),
             ("move_event", {"event_id": event_id, "date": date, "start": start})]
    return TaskSpec(goal, state, checks, calls, tier)


def _tier45(rng, state, tier):
    events = state["events"]
    anchor_id, moved_id = rng.sample(sorted(events), 2)
    while events[anchor_id]["date"] == events[moved_id]["date"]:
        anchor_id, moved_id = rng.sample(sorted(events), 2)
    anchor, moved = events[anchor_id], events[moved_id]
    date = anchor["date"]
    person = rng.choice([p for p in NAMES.people if p not in moved["attendees"]])
    if tier == 4:
        return _create_near(rng, state, anchor, person)
    length = minutes(moved["end"]) - minutes(moved["start"])
    start = free_slot(events, date, length)
    end = hhmm(minutes(start) + length)
    attendees = [*moved["attendees"], person]
    goal = pick(rng, [
        "Move '{m}' to the earliest free slot on the same day as '{a}', and add {p} to it.",
        "Reschedule '{m}' onto the day of '{a}' (first free time that day) and invite {p}.",
    ], m=moved["title"], a=anchor["title"], p=person)
    checks = [Check("moved", f"{moved_id} is on {date} {start}-{end} with {person}", "eq",
                    ("events", moved_id),
                    {**moved, "date": date, "start": start, "end": end, "attendees": attendees}),
              _guard([moved_id])]
    calls = [("find_event", {"title": moved["title"]}), ("find_event", {"title": anchor["title"]}),
             ("find_free_slot", {"date": date, "duration_minutes": length}),
             ("move_event", {"event_id": moved_id, "date": date, "start": start}),
             ("add_attendee", {"event_id": moved_id, "name": person})]
    return TaskSpec(goal, state, checks, calls, 5)


def _create_near(rng, state, anchor, person):
    title = rng.choice([t for t in _TITLES if all(t != e["title"] for e in state["events"].values())])
    duration = rng.choice([30, 45, 60])
    date = anchor["date"]
    start = free_slot(state["events"], date, duration)
    end = hhmm(minutes(start) + duration)
    goal = pick(rng, [
        ("Schedule a {n}-minute '{t}' at the earliest free time on the day of '{a}', and invite "
        "{p}."),
        ("On the same day as '{a}', book a {n}-minute '{t}' in the first free slot and add {p} "
        "as an attendee."),
    ], n=duration, t=title, a=anchor["title"], p=person)
    new_id = f"EV-{state['next_id']}"
    fields = {"title": title, "date": date, "start": start, "end": end, "attendees": [person]}
    checks = [Check("created", f"'{title}' on {date} {start}-{end} with {person} exists", "match",
                    ("events",), fields),
              Check("one_new", "exactly one event was added", "count", ("events",),
                    len(state["events"]) + 1),
              _guard([], allow_new=True)]
    calls = [("find_event", {"title": anchor["title"]}),
             ("find_free_slot", {"date": date, "duration_minutes": duration}),
             ("create_event", {k: fields[k] for k in ("title", "date", "start", "end")}),
             ("add_attendee", {"event_id": new_id, "name": person})]
    return TaskSpec(goal, state, checks, calls, 4)
