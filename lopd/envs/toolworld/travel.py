"""ToolWorld domain: flight booking (search, book, cancel, rebook).

Tiers: 1 = one call with the flight or booking id in the goal; 2 = book the cheapest flight of
a route, or cancel a passenger's booking; 3 = move a passenger between two given flights
(look up the booking, cancel, book); 4 = book the cheapest round trip; 5 = rebook a
passenger's flight onto the cheapest flight of the same route on another day.
"""

from __future__ import annotations

import random

from lopd.envs.toolworld.base import (
    NAMES,
    Check,
    Domain,
    Param,
    TaskSpec,
    ToolError,
    is_count,
    pick,
    tool,
)

_CITIES = ["Lisbon", "Madrid", "Paris", "Berlin", "Rome", "Vienna", "Dublin", "Prague"]
_DATES = ["2025-05-02", "2025-05-03", "2025-05-04", "2025-05-05"]
_FID = Param("string", "Flight id, e.g. 'FL-204'.")
_PASSENGER = Param("string", "Full name of the passenger.")


class Travel(Domain):
    name = "travel"
    description = "an airline booking system"
    example = ("search_flights", {"origin": "Paris", "destination": "Rome", "date": "2025-05-02"})

    def _flight(self, flight_id: str) -> dict:
        return self._lookup("flights", flight_id, "flight")

    @tool("Search flights for a route and date; returns ids, departure times, prices, seats.",
          origin=Param("string", "Departure city, e.g. 'Paris'."),
          destination=Param("string", "Arrival city, e.g. 'Rome'."),
          date=Param("string", "Date as YYYY-MM-DD."))
    def search_flights(self, origin: str, destination: str, date: str) -> dict:
        rows = [{"flight_id": k, "departure": f["departure"], "price": f["price"],
                 "seats_left": f["seats"]}
                for k, f in self.state["flights"].items()
                if f["origin"].lower() == origin.lower()
                and f["destination"].lower() == destination.lower() and f["date"] == date]
        return {"flights": rows}

    @tool("Get a flight's details (route, date, time, price, seats left).", flight_id=_FID)
    def get_flight(self, flight_id: str) -> dict:
        return {"flight_id": flight_id, **self._flight(flight_id)}

    @tool("Book a seat on a flight for a passenger.", flight_id=_FID, passenger=_PASSENGER)
    def book_flight(self, flight_id: str, passenger: str) -> dict:
        flight = self._flight(flight_id)
        if flight["seats"] <= 0:
            raise ToolError(f"flight '{flight_id}' is full")
        booking_id = f"BK-{self.state['next_booking']}"
        self.state["next_booking"] += 1
        flight["seats"] -= 1
        self.state["bookings"][booking_id] = {"flight_id": flight_id, "passenger": passenger}
        return {"booking_id": booking_id, "flight_id": flight_id, "passenger": passenger}

    @tool("Cancel a booking (frees its seat).",
          booking_id=Param("string", "Booking id, e.g. 'BK-5001'."))
    def cancel_booking(self, booking_id: str) -> dict:
        booking = self.state["bookings"].pop(booking_id, None)
        if booking is None:
            raise ToolError(f"unknown booking '{booking_id}'")
        self.state["flights"][booking["flight_id"]]["seats"] += 1
        return {"booking_id": booking_id, "cancelled": True}

    @tool("List a passenger's bookings (booking ids and flight ids).", passenger=_PASSENGER)
    def list_bookings(self, passenger: str) -> dict:
        rows = [{"booking_id": k, "flight_id": b["flight_id"]}
                for k, b in self.state["bookings"].items()
                if b["passenger"].lower() == passenger.lower()]
        return {"passenger": passenger, "bookings": rows}

    def domain_problems(self) -> list[str]:
        flights = self.state["flights"]
        problems = [f"{key}: seats {flight['seats']!r} is not a count >= 0"
                    for key, flight in flights.items() if not is_count(flight["seats"])]
        for key, booking in self.state["bookings"].items():
            if booking["flight_id"] not in flights:
                problems.append(f"{key}: unknown flight {booking['flight_id']!r}")
            if not isinstance(booking["passenger"], str):
                problems.append(f"{key}: passenger is not a name")
        if not is_count(self.state["next_booking"]):
            problems.append("next_booking is not a count")
        return problems

    @staticmethod
    def generate(rng: random.Random, tier: int) -> TaskSpec:
        state, routes = _make_state(rng)
        maker = {1: _tier12, 2: _tier12, 3: _tier3, 4: _tier4, 5: _tier5}[tier]
        return maker(rng, state, routes, tier)


def _make_state(rng: random.Random) -> tuple[dict, list[tuple[str, str]]]:
    cities = rng.sample(_CITIES, 4)
    pairs = [(cities[0], cities[1]), (cities[2], cities[3]), (cities[0], cities[2])]
    routes = [r for a, b in pairs for r in ((a, b), (b, a))]
    numbers = iter(rng.sample(range(100, 999), len(routes) * len(_DATES) * 2))
    flights = {}
    for origin, destination in routes:
        for date in _DATES:
            prices = rng.sample(range(60, 400, 5), 2)
            for price in prices:
                flights[f"FL-{next(numbers)}"] = {
                    "origin": origin, "destination": destination, "date": date,
                    "departure": f"{rng.randrange(6, 22):02d}:{rng.choice(['00', '30'])}",
                    "price": float(price), "seats": rng.randrange(1, 9),
                }
    people = rng.sample(NAMES.people, 4)
    bookings = {}
    for index, person in enumerate(people):
        bookings[f"BK-{5001 + index}"] = {"flight_id": rng.choice(sorted(flights)),
                                          "passenger": person}
    return {"flights": flights, "bookings": bookings, "next_booking": 6001}, routes


def _cheapest(state, origin, destination, date) -> str:
    options = [(f["price"], k) for k, f in state["flights"].items()
               if (f["origin"], f["destination"], f["date"]) == (origin, destination, date)]
    return min(options)[1]


def _seat(state, flight_id, delta):
    seats = state["flights"][flight_id]["seats"] + delta
    return Check(f"seats_{flight_id}", f"{flight_id} has {seats} seats left", "eq",
                 ("flights", flight_id, "seats"), seats)


def _booked(flight_id, person):
    return Check(f"booked_{flight_id}", f"{person} is booked on {flight_id}", "match",
                 ("bookings",), {"flight_id": flight_id, "passenger": person})


def _kept(cancelled, count):
    return [Check("bookings_kept", "no other booking was cancelled or changed", "kept_except",
                  ("bookings",), list(cancelled), guard=True),
            Check("booking_count", f"{count} bookings in total", "count", ("bookings",), count,
                  guard=True)]


def _free_flight(rng, state, exclude=()):
    return rng.choice([k for k, f in sorted(state["flights"].items())
                       if f["seats"] > 0 and k not in exclude])


def _tier12(rng, state, routes, tier):
    bookings, n = state["bookings"], len(state["bookings"])
    person = rng.choice([p for p in NAMES.people
                         if all(b["passenger"] != p for b in bookings.values())])
    if rng.random() < 0.5:
        booking_id = rng.choice(sorted(bookings))
        flight_id, owner = bookings[booking_id]["flight_id"], bookings[booking_id]["passenger"]
        who = f"booking {booking_id}" if tier == 1 else f"{owner}'s booking"
        goal = pick(rng, ["Cancel {w}.", "Please cancel {w}; the trip is off.",
                          "{W} should be cancelled."], w=who, W=who[0].upper() + who[1:])
        checks = [Check("cancelled", f"{booking_id} is cancelled", "missing",
                        ("bookings", booking_id)), _seat(state, flight_id, +1),
                  *_kept([booking_id], n - 1)]
        call = ("cancel_booking", {"booking_id": booking_id})
        calls = [call] if tier == 1 else [("list_bookings", {"passenger": owner}), call]
        return TaskSpec(goal, state, checks, calls, tier)
    if tier == 1:
        flight_id = _free_flight(rng, state)
        goal = pick(rng, ["Book flight {f} for {p}.", "Reserve a seat on {f} for {p}.",
                          "{p} needs a seat on flight {f}."], f=flight_id, p=person)
        calls = [("book_flight", {"flight_id": flight_id, "passenger": person})]
    else:
        origin, destination = rng.choice(routes)
        date = rng.choice(_DATES)
        flight_id = _cheapest(state, origin, destination, date)
        goal = pick(rng, ["Book the cheapest flight from {o} to {d} on {t} for {p}.",
                          "{p} wants to fly {o} to {d} on {t}; book the lowest fare.",
                          "Find the least expensive {o}-{d} flight on {t} and book it for {p}."],
                    o=origin, d=destination, t=date, p=person)
        calls = [("search_flights", {"origin": origin, "destination": destination, "date": date}),
                 ("book_flight", {"flight_id": flight_id, "passenger": person})]
    if state["flights"][flight_id]["seats"] == 0:
        state["flights"][flight_id]["seats"] = 1
    checks = [_booked(flight_id, person), _seat(state, flight_id, -1), *_kept([], n + 1)]
    return TaskSpec(goal, state, checks, calls, tier)


def _tier3(rng, state, routes, tier):
    bookings = state["bookings"]
    booking_id = rng.choice(sorted(bookings))
    old, person = bookings[booking_id]["flight_id"], bookings[booking_id]["passenger"]
    new = _free_flight(rng, state, exclude=(old,))
    goal = pick(rng, ["Move {p} from flight {a} to flight {b}.",
                      "{p} is on flight {a} but needs to be on {b} instead; rebook them.",
                      "Switch {p}'s booking from {a} to {b}."], p=person, a=old, b=new)
    checks = [Check("old_cancelled", f"{booking_id} is cancelled", "missing",
                    ("bookings", booking_id)), _booked(new, person),
              _seat(state, old, +1), _seat(state, new, -1), *_kept([booking_id], len(bookings))]
    calls = [("list_bookings", {"passenger": person}),
             ("cancel_booking", {"booking_id": booking_id}),
             ("book_flight", {"flight_id": new, "passenger": person})]
    return TaskSpec(goal, state, checks, calls, tier)


def _tier4(rng, state, routes, tier):
    origin, destination = rng.choice(routes)
    out_date, back_date = sorted(rng.sample(_DATES, 2))
    person = rng.choice([p for p in NAMES.people
                         if all(b["passenger"] != p for b in state["bookings"].values())])
    out = _cheapest(state, origin, destination, out_date)
    back = _cheapest(state, destination, origin, back_date)
    for flight_id in (out, back):
        state["flights"][flight_id]["seats"] = max(1, state["flights"][flight_id]["seats"])
    goal = pick(rng, [
        "Book {p} the cheapest flight from {o} to {d} on {a} and the cheapest flight back on {b}.",
        "{p} needs a round trip {o}-{d}: out on {a}, back on {b}. Book the lowest fares.",
    ], p=person, o=origin, d=destination, a=out_date, b=back_date)
    checks = [_booked(out, person), _booked(back, person), _seat(state, out, -1),
              _seat(state, back, -1), *_kept([], len(state["bookings"]) + 2)]
    calls = [("search_flights", {"origin": origin, "destination": destination, "date": out_date}),
             ("search_flights", {"origin": destination, "destination": origin, "date": back_date}),
             ("book_flight", {"flight_id": out, "passenger": person}),
             ("book_flight", {"flight_id": back, "passenger": person})]
    return TaskSpec(goal, state, checks, calls, tier)


def _tier5(rng, state, routes, tier):
    bookings, flights = state["bookings"], state["flights"]
    booking_id = rng.choice(sorted(bookings))
    old, person = bookings[booking_id]["flight_id"], bookings[booking_id]["passenger"]
    route = flights[old]
    date = rng.choice([d for d in _DATES if d != route["date"]])
    new = _cheapest(state, route["origin"], route["destination"], date)
    flights[new]["seats"] = max(1, flights[new]["seats"])
    goal = pick(rng, [
        ("{p} has to travel on {t} instead: rebook their flight onto the cheapest flight of the "
        "same route that day, and cancel the old booking."),
        ("Change {p}'s trip to {t}: same route, cheapest flight on that day. Cancel the "
        "current booking."),
    ], p=person, t=date)
    checks = [Check("old_cancelled", f"{booking_id} is cancelled", "missing",
                    ("bookings", booking_id)), _booked(new, person),
              _seat(state, old, +1), _seat(state, new, -1), *_kept([booking_id], len(bookings))]
    calls = [("list_bookings", {"passenger": person}), ("get_flight", {"flight_id": old}),
             ("search_flights", {"origin": route["origin"], "destination": route["destination"],
                                 "date": date}),
             ("book_flight", {"flight_id": new, "passenger": person}),
             ("cancel_booking", {"booking_id": booking_id})]
    return TaskSpec(goal, state, checks, calls, tier)
