"""ACEBench's airline scenario (``Travel``): three users, eleven flights, four reservations.

Written for lopd from the benchmark's published behaviour (same data, same rules, same result
texts), including the quirks that decide end states:

- bookings authenticate by user id and password; the flight is the first available one with
  that number; the fare is the economy price for "Economy Class" and the business price for
  anything else; checked bags above the free allowance (regular 1/2, silver 2/3, gold 3/3 for
  economy/business) cost 50 each; payment is "cash" or "bank"; a new reservation gets id
  ``res_<n+1>`` and no origin/destination fields;
- ``modify_flight`` changes the flight only to one with the same origin and destination,
  charges or refunds a cabin change against the chosen payment method (the cabin changes even
  when the balance cannot pay, as in ACEBench), and charges added bags above the allowance;
- ``cancel_reservation`` refunds to the cash balance (the full fare when the airline cancelled
  or more than a day before departure, else 90%) and keeps the reservation in the list; the
  clock stands at 2024-07-14 06:00.

Where ACEBench's code raises (a wrong password or flight number in ``reserve_flight``, an
unknown cabin in the baggage fee), the call is answered with an error and changes nothing,
which is what the raise amounts to there. Only ``users`` and ``reservations`` are scored.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

from lopd.envs.acebench.phone import Scenario

_USERS = {  # id: (name, password, cash, bank, membership)
    "user1": ("Eve", "password123", 2000.0, 50000.0, "regular"),
    "user2": ("Frank", "password456", 8000.0, 8000.0, "silver"),
    "user3": ("Grace", "password789", 1000.0, 5000.0, "gold"),
}
_FLIGHTS = [  # (number, origin, destination, departs, arrives, seats, economy, business)
    ("CA1234", "Beijing", "Shanghai", "2024-07-15 08:00:00", "2024-07-15 10:30:00", 5, 1200, 3000),
    ("MU5678", "Shanghai", "Beijing", "2024-07-16 09:00:00", "2024-07-16 11:30:00", 3, 1900, 3000),
    ("CZ4321", "Shanghai", "Beijing", "2024-07-16 20:00:00", "2024-07-16 22:00:00", 8, 2500, 4000),
    ("CZ4352", "Shanghai", "Beijing", "2024-07-17 20:00:00", "2024-07-17 22:00:00", 8, 1600, 2500),
    ("MU3561", "Beijing", "Nanjing", "2024-07-18 08:00:00", "2024-07-18 10:00:00", 8, 1500, 4000),
    ("MU1566", "Beijing", "Nanjing", "2024-07-18 20:00:00", "2024-07-18 22:00:00", 8, 1500, 4000),
    ("CZ1765", "Nanjing", "Shenzhen", "2024-07-17 20:30:00", "2024-07-17 22:00:00", 8, 1500, 2500),
    ("CZ1765", "Nanjing", "Shenzhen", "2024-07-18 12:30:00", "2024-07-18 15:00:00", 8, 1500, 2500),
    ("MH1765", "Xiamen", "Chengdu", "2024-07-17 12:30:00", "2024-07-17 15:00:00", 8, 1500, 2500),
    ("MH2616", "Chengdu", "Xiamen", "2024-07-18 18:30:00", "2024-07-18 21:00:00", 8, 1500, 2500),
    ("MH2616", "Chengdu", "Fuzhou", "2024-07-16 18:30:00", "2024-07-16 21:00:00", 8, 1500, 2500),
]
_RESERVATIONS = [  # (id, user, flight, cabin, origin, destination); paid by bank, 1 bag
    ("res_1", "user1", "CA1234", "Economy Class", "Beijing", "Shanghai"),
    ("res_2", "user1", "MU5678", "Business Class", "Shanghai", "Beijing"),
    ("res_3", "user2", "MH1765", "Business Class", "Xiamen", "Chengdu"),
    ("res_4", "user2", "MU2616", "Business Class", "Chengdu", "Xiamen"),
]
_FREE_BAGS = {"regular": {"Economy Class": 1, "Business Class": 2},
              "silver": {"Economy Class": 2, "Business Class": 3},
              "gold": {"Economy Class": 3, "Business Class": 3}}
_NOW = datetime(2024, 7, 14, 6, 0, 0)
_TIME = "%Y-%m-%d %H:%M:%S"


class Travel(Scenario):
    """Flights, users and reservations of an airline (see the module docstring)."""

    SAVED = ("users", "reservations")

    def __init__(self) -> None:
        self.users = {uid: {"user_name": name, "password": pw, "cash_balance": cash,
                            "bank_balance": bank, "membership_level": level}
                      for uid, (name, pw, cash, bank, level) in _USERS.items()}
        keys = ("flight_no", "origin", "destination", "depart_time", "arrival_time",
                "seats_available", "economy_price", "business_price")
        self.flights = [dict(zip(keys, row), status="available") for row in _FLIGHTS]
        self.reservations = [
            {"reservation_id": rid, "user_id": uid, "flight_no": flight, "payment_method": "bank",
             "cabin": cabin, "baggage": 1, "origin": origin, "destination": destination}
            for rid, uid, flight, cabin, origin, destination in _RESERVATIONS]

    def _flight(self, number: Any, available: bool = False) -> dict[str, Any] | None:
        return next((f for f in self.flights if f["flight_no"] == number
                     and (not available or f["status"] == "available")), None)

    def get_flight_details(self, origin: str | None = None,
                           destination: str | None = None) -> list[dict[str, Any]] | str:
        flights = [f for f in self.flights if (not origin or f["origin"] == origin)
                   and (not destination or f["destination"] == destination)]
        if not flights:
            return "There are no direct flights that meet the criteria."
        return copy.deepcopy(flights)

    def get_user_details(self, user_id: str, password: str) -> dict[str, Any]:
        user = self.users.get(user_id) if isinstance(user_id, str) else None
        if user and user["password"] == password:
            return {k: v for k, v in user.items() if k != "password"}
        return {"status": "error", "message": "Incorrect username or password."}

    def get_reservation_details(self, reservation_id: str | None = None,
                                user_id: str | None = None) -> list[dict[str, Any]] | dict:
        if reservation_id:
            found = [r for r in self.reservations if r["reservation_id"] == reservation_id]
        elif user_id:
            found = [r for r in self.reservations if r["user_id"] == user_id]
        else:
            return {"status": "error", "message": "Please provide a valid reservation ID or "
                                                  "user ID"}
        return [{**copy.deepcopy(r), "flight_info": copy.deepcopy(self._flight(r["flight_no"]))}
                for r in found]

    def find_transfer_flights(self, origin_city: str, transfer_city: str,
                              destination_city: str) -> list[dict[str, Any]] | str:
        first = [f for f in self.flights if f["origin"] == origin_city
                 and f["destination"] == transfer_city and f["status"] == "available"]
        second = [f for f in self.flights if f["origin"] == transfer_city
                  and f["destination"] == destination_city and f["status"] == "available"]
        pairs = [{"first_leg": copy.deepcopy(a), "second_leg": copy.deepcopy(b)}
                 for a in first for b in second
                 if datetime.strptime(a["arrival_time"], _TIME)
                 < datetime.strptime(b["depart_time"], _TIME)]
        return pairs or "No connecting flights that meet the criteria were found."

    def reserve_flight(self, user_id: str, password: str, flight_no: str, cabin: str,
                       payment_method: str, baggage_count: int) -> str:
        user = self.users.get(user_id) if isinstance(user_id, str) else None
        if not user or user["password"] != password:
            raise KeyError("membership_level")  # ACEBench reads the level of an error dict
        flight = self._flight(flight_no, available=True)
        if flight is None:
            raise TypeError("'NoneType' object is not subscriptable")
        fare = flight["economy_price"] if cabin == "Economy Class" else flight["business_price"]
        total = fare + _bag_fee(user["membership_level"], cabin, baggage_count)
        if payment_method not in ("cash", "bank"):
            return "Invalid payment method"
        balance = f"{payment_method}_balance"
        if total > user[balance]:
            return (f"Your {payment_method} balance is insufficient. Please consider using "
                    "another payment method.")
        user[balance] -= total
        flight["seats_available"] -= 1
        reservation_id = f"res_{len(self.reservations) + 1}"
        self.reservations.append({"reservation_id": reservation_id, "user_id": user_id,
                                  "flight_no": flight_no, "payment_method": payment_method,
                                  "cabin": cabin, "baggage": baggage_count})
        return (f"Booking successful. Reservation ID: {reservation_id}. Total cost: {total} yuan "
                "(including baggage fees).")

    def modify_flight(self, user_id: str, reservation_id: str, new_flight_no: str | None = None,
                      new_cabin: str | None = None, add_baggage: int = 0,
                      new_payment_method: str | None = None) -> str:
        reservation = next((r for r in self.reservations if r["reservation_id"] == reservation_id
                            and r["user_id"] == user_id), None)
        if reservation is None:
            return "Reservation not found or user ID does not match."
        current = self._flight(reservation["flight_no"])
        if current is None:
            return "Flight information not found."
        method = new_payment_method or reservation["payment_method"]
        user = self.users[user_id]
        notes = []
        if new_flight_no and new_flight_no != reservation["flight_no"]:
            new = self._flight(new_flight_no)
            if not new or (new["origin"], new["destination"]) != (current["origin"],
                                                                  current["destination"]):
                return "Flight change failed: Invalid new flight number or destination does not match."
            reservation["flight_no"] = new_flight_no
            notes.append("Flight number has been changed.")
        if new_cabin and new_cabin != reservation.get("cabin"):
            difference = _cabin_price(current, new_cabin) - _cabin_price(current, reservation["cabin"])
            reservation["cabin"] = new_cabin
            if difference > 0:
                paid = _charge(user, method, -difference)
                notes.append(f"Cabin change successful. Price difference paid: {difference}."
                             if paid else "Insufficient balance to pay the cabin price difference.")
            elif difference < 0:
                _charge(user, method, -difference)
                notes.append(f"Cabin change successful. Price difference refunded: {-difference}.")
        if add_baggage > 0:
            total = reservation.get("baggage", 0) + add_baggage
            free = _FREE_BAGS.get(user["membership_level"], {}).get(reservation["cabin"], 0)
            cost = max(0, total - free) * 50
            if cost > 0:
                notes.append(f"Baggage has been added. Additional fee to be paid: {cost}."
                             if _charge(user, method, -cost)
                             else "Insufficient balance to pay the additional baggage fees.")
            reservation["baggage"] = total
        return " ".join(notes) or "Modification completed with no additional fees."

    def cancel_reservation(self, user_id: str, reservation_id: str, reason: str) -> str:
        user = self.users.get(user_id) if isinstance(user_id, str) else None
        if not user:
            return "Invalid user ID."
        reservation = next((r for r in self.reservations if r["reservation_id"] == reservation_id
                            and r["user_id"] == user_id), None)
        if reservation is None:
            return "Invalid reservation ID or it does not belong to the user."
        flight = self._flight(reservation["flight_no"])
        if flight is None:
            return "Invalid flight information."
        departs = datetime.strptime(flight["depart_time"], _TIME)
        if _NOW > departs:
            return "The flight segment has been used and cannot be canceled."
        fare = _cabin_price(flight, reservation["cabin"], default_business=True)
        if reason == "The airline has canceled the flight.":
            user["cash_balance"] += fare
            return (f"The flight has been canceled. Your reservation will be canceled free of "
                    f"charge, and {fare} yuan has been refunded.")
        if departs - _NOW > timedelta(days=1):
            user["cash_balance"] += fare
            return (f"More than 24 hours before departure. Free cancellation successful, {fare} "
                    "yuan has been refunded.")
        fee = fare * 0.1
        user["cash_balance"] += fare - fee
        return (f"Less than 24 hours before departure. A cancellation fee of {fee} yuan has been "
                f"deducted, and {fare - fee} yuan has been refunded.")


def _bag_fee(level: str, cabin: Any, bags: Any) -> int:
    """50 per bag above the allowance; an unknown level or cabin raises ``KeyError`` (as in
    ACEBench, so the booking fails)."""
    return max(bags - _FREE_BAGS[level][cabin], 0) * 50


def _cabin_price(flight: dict[str, Any], cabin: Any, default_business: bool = False) -> Any:
    """The fare of ``cabin`` on ``flight``: an unknown cabin costs 0 in a cabin change and the
    business fare in a cancellation (the two rules of ACEBench)."""
    if cabin == "Economy Class":
        return flight["economy_price"]
    if cabin == "Business Class" or default_business:
        return flight["business_price"]
    return 0


def _charge(user: dict[str, Any], method: Any, amount: Any) -> bool:
    """Add ``amount`` (negative: a charge) to the cash or bank balance; False (nothing changed)
    when the balance would go below 0; any other method changes nothing and succeeds."""
    if method not in ("cash", "bank"):
        return True
    key = f"{method}_balance"
    if user[key] + amount < 0:
        return False
    user[key] += amount
    return True
