"""ACEBench's phone scenarios: the device (``BaseApi``), text messages (``MessageApi``),
reminders (``ReminderApi``) and a food delivery platform (``FoodPlatform``).

Written for lopd from the benchmark's published behaviour: the same default users, inbox,
reminders, menus and balances, the same checks in the same order and the same result texts,
so that a call sequence leaves the same state as in ACEBench. The quirks that decide end
states are kept on purpose:

- every class carries its own ``wifi`` / ``logged_in`` flags (loaded from the task's
  ``BaseApi`` configuration); ``turn_on_wifi`` / ``login_device`` reach every instance, because
  the environment calls a method on every involved class that has it (as ACEBench does);
- the inbox holds at most 6 messages and reminders at most 6; a sent message gets the next id
  (from 7) and no ``time``, so the latest/earliest-message lookups fail once one was sent;
- a food order needs the user logged in to the platform (which needs Wi-Fi), every product on
  the merchant's menu, integer quantities above 0 and enough balance; ``check_balance`` of an
  unknown user is 0.0;
- ``search_reminders`` is offered by the task schemas but has no implementation in ACEBench:
  calling it is answered "No matching function found".

Only the attributes in ``SAVED`` are compared with the expected end state.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

Result = dict[str, Any]

_MESSAGE_USERS = {
    "Eve": ("USR100", "123-456-7890", "Software Engineer"),
    "Frank": ("USR101", "234-567-8901", "Data Scientist"),
    "Grace": ("USR102", "345-678-9012", "Product Manager"),
    "Helen": ("USR103", "456-789-0123", "UX Designer"),
    "Isaac": ("USR104", "567-890-1234", "DevOps Engineer"),
    "Jack": ("USR105", "678-901-2345", "Marketing Specialist"),
}
_INBOX = [  # (sender id, receiver id, text, date): message ids 1..6
    ("USR100", "USR101", ("Hey Frank, don't forget about our meeting on 2024-06-11 at 4 PM in "
     "Conference Room 1."), "2024-06-09"),
    ("USR101", "USR102", ("Can you help me order a \"Margherita Pizza\" delivery? The merchant "
     "is Domino's."), "2024-03-09"),
    ("USR102", "USR103", ("Please check the milk tea delivery options available from Heytea and "
     "purchase a cheaper milk tea for me. After making the purchase, remember to reply to me "
     "with \"Already bought.\""), "2023-12-05"),
    ("USR103", "USR102", "No problem Helen, I can assist you.", "2024-09-09"),
    ("USR104", "USR105", "Isaac, are you available for a call?", "2024-06-06"),
    ("USR105", "USR104", "Yes Jack, let's do it in 30 minutes.", "2024-01-15"),
]
_REMINDERS = [  # (reminder_id, title, description, time): keys 1..3
    (1001, "Doctor's Appointment", "Visit Dr. Smith for a checkup.", "2024-07-15 09:30"),
    (1002, "Team Meeting", "Monthly project review with the team.", "2024-07-17 11:00"),
    (1003, "To-do list", ("First, help Frank place a food delivery order at \"Hema Fresh,\" "
     "ordering two \"Fresh Gift Packs.\" Then, send a message to Frank saying, \"The price of "
     "the purchased goods is () yuan.\" Replace the parentheses with the actual amount, keeping "
     "one decimal place."), "2024-07-16 11:00"),
]
_FOOD_USERS = {  # name: (user_id, password, balance)
    "Eve": ("U100", "password123", 500.0), "Frank": ("U101", "password456", 300.0),
    "Grace": ("U102", "password789", 150.0), "Helen": ("U103", "password321", 800.0),
    "Isaac": ("U104", "password654", 400.0), "Jack": ("U105", "password654", 120.0),
}
_MERCHANTS = {  # name: (merchant_id, service type, [(product, price), ...])
    "Domino's": ("M100", "Pizza", [("Margherita Pizza", 68.0), ("Super Supreme Pizza", 88.0)]),
    "Rice Village Bibimbap": ("M101", "Bibimbap", [("Stone Pot Bibimbap", 35.0),
                                                   ("Korean Beef Bibimbap", 45.0)]),
    "Haidilao": ("M102", "Hotpot", [("Beef Rolls", 68.0), ("Seafood Platter", 88.0)]),
    "Heytea": ("M103", "Milk Tea", [("Cheese Milk Tea", 25.0),
                                    ("Four Seasons Spring Milk Tea", 22.0)]),
    "Hema Fresh": ("M104", "Fresh Grocery", [("Organic Vegetable Pack", 15.0),
                                             ("Fresh Gift Pack", 99.0)]),
    "Jiutian BBQ": ("M105", "BBQ", [("Korean Grilled Beef", 128.0),
                                    ("Grilled Pork Belly", 78.0)]),
}


def fail(message: str) -> Result:
    return {"status": False, "message": message}


class Scenario:
    """A scenario class: its public methods are tools, ``SAVED`` names the scored state."""

    SAVED: tuple[str, ...] = ()

    def load(self, config: dict[str, Any]) -> None:
        """Apply a task's ``initial_config`` entry (ACEBench's ``_load_scenario``)."""

    def state(self) -> dict[str, Any]:
        """The scored attributes, as a deep copy."""
        return {name: copy.deepcopy(getattr(self, name)) for name in self.SAVED}


class BaseApi(Scenario):
    """The phone itself: Wi-Fi and the device login."""

    SAVED = ("wifi", "logged_in")

    def __init__(self) -> None:
        self.wifi = False
        self.logged_in = True

    def load(self, config: dict[str, Any]) -> None:
        self.wifi = config.get("wifi", False)
        self.logged_in = config.get("logged_in", True)

    def turn_on_wifi(self) -> Result:
        self.wifi = True
        return {"status": True, "message": "Wi-Fi has been turned on"}

    def login_device(self) -> Result:
        self.logged_in = True
        return {"status": True, "message": "Device has been logged in"}


class MessageApi(BaseApi):
    """Text messages between six users; the inbox holds at most ``capacity`` messages."""

    SAVED = ("inbox",)
    capacity = 6

    def __init__(self) -> None:
        super().__init__()
        self.user_list = {name: {"user_id": uid, "phone_number": phone, "occupation": job}
                          for name, (uid, phone, job) in _MESSAGE_USERS.items()}
        self.inbox: dict[Any, dict[str, Any]] = {
            index: {"sender_id": s, "receiver_id": r, "message": text, "time": day}
            for index, (s, r, text, day) in enumerate(_INBOX, start=1)}
        self.message_id_counter = len(_INBOX)

    def _uid(self, name: Any) -> str | None:
        user = self.user_list.get(name) if isinstance(name, str) else None
        return user["user_id"] if user else None

    def send_message(self, sender_name: str, receiver_name: str, message: str) -> Result:
        if not self.logged_in:
            return fail("Device not logged in, unable to send message")
        if not self.wifi:
            return fail("Wi-Fi is turned off, cannot send messages at this time")
        if len(self.inbox) >= self.capacity:
            return fail("Inbox capacity is full. You need to ask the user which message to "
                        "delete.")
        sender, receiver = self._uid(sender_name), self._uid(receiver_name)
        if sender is None or receiver is None:
            return fail("Sender or receiver does not exist")
        self.message_id_counter += 1
        self.inbox[self.message_id_counter] = {"sender_id": sender, "receiver_id": receiver,
                                               "message": message}
        return {"status": True, "message": f"Message successfully sent to {receiver_name}."}

    def delete_message(self, message_id: int) -> Result:
        if not self.logged_in:
            return fail("Device not logged in, unable to delete message")
        if message_id not in self.inbox:
            return fail("Message ID does not exist")
        del self.inbox[message_id]
        return {"status": True, "message": f"Message ID {message_id} has been successfully "
                                           "deleted."}

    def view_messages_between_users(self, sender_name: str, receiver_name: str) -> Result:
        if not self.logged_in:
            return fail("Device not logged in, unable to view message information")
        sender, receiver = self._uid(sender_name), self._uid(receiver_name)
        if sender is None:
            return fail("Sender does not exist")
        if receiver is None:
            return fail("Receiver does not exist")
        found = [{"id": key, "sender": sender_name, "receiver": receiver_name,
                  "message": msg["message"]} for key, msg in self.inbox.items()
                 if msg["sender_id"] == sender and msg["receiver_id"] == receiver]
        if not found:
            return fail("No related message records found")
        return {"status": True, "messages": found}

    def search_messages(self, user_name: str, keyword: str) -> Result:
        user = self._uid(user_name)
        if user is None:
            return fail("User does not exist")
        needle = keyword.lower()
        found = [{"id": key, "sender_id": msg["sender_id"], "receiver_id": msg["receiver_id"],
                  "message": msg["message"]} for key, msg in self.inbox.items()
                 if user in (msg["sender_id"], msg["receiver_id"])
                 and needle in msg["message"].lower()]
        if not found:
            return fail("No messages found containing the keyword")
        return {"status": True, "messages": found}

    def _dated_ids(self) -> list[tuple[datetime, Any]]:
        """(date, id) of every message; a message without a date raises ``KeyError`` (as in
        ACEBench, where sent messages have no ``time``)."""
        return [(datetime.strptime(msg["time"], "%Y-%m-%d"), key)
                for key, msg in self.inbox.items()]

    def get_latest_message_id(self) -> Result:
        if not self.logged_in:
            return fail("Device not logged in, unable to retrieve the latest sent message ID.")
        if not self.inbox:
            return fail("No message records found")
        dated = self._dated_ids()
        best = dated[0]
        for item in dated[1:]:
            best = item if item[0] > best[0] else best
        return {"status": True, "message": f"The latest message ID is {best[1]}",
                "message_id": best[1]}

    def get_earliest_message_id(self) -> Result:
        if not self.logged_in:
            return fail("Device not logged in, unable to retrieve the earliest sent message "
                        "ID.")
        if not self.inbox:
            return fail("No message records found")
        dated = self._dated_ids()
        best = dated[0]
        for item in dated[1:]:
            best = item if item[0] < best[0] else best
        return {"status": True, "message": f"The earliest message ID is {best[1]}",
                "message_id": best[1]}


class ReminderApi(BaseApi):
    """Reminders keyed 1, 2, 3, ...; at most ``capacity`` of them."""

    SAVED = ("reminder_list",)
    capacity = 6

    def __init__(self) -> None:
        super().__init__()
        self.reminder_list: dict[Any, dict[str, Any]] = {
            index: {"reminder_id": rid, "title": title, "description": text, "time": when,
                    "notified": False}
            for index, (rid, title, text, when) in enumerate(_REMINDERS, start=1)}
        self.reminder_id_counter = len(_REMINDERS)

    def view_reminder_by_title(self, title: str) -> Result:
        if not self.logged_in:
            return fail("The device is not logged in, so you cannot view notifications")
        for reminder in self.reminder_list.values():
            if reminder["title"] == title:
                return {"status": True, "reminder": copy.deepcopy(reminder)}
        return fail(f"No reminder found with the title '{title}'.")

    def add_reminder(self, title: str, description: str, time: str) -> Result:
        if not self.logged_in:
            return fail("Device not logged in. Unable to add a new reminder.")
        if len(self.reminder_list) >= self.capacity:
            return fail("Reminder capacity is full. Unable to add a new reminder.")
        self.reminder_id_counter += 1
        key = self.reminder_id_counter
        self.reminder_list[key] = {"reminder_id": key, "title": title,
                                   "description": description, "time": time, "notified": False}
        return {"status": True, "message": f"Reminder '{title}' was successfully added."}


class FoodPlatform(BaseApi):
    """A food delivery platform: users with balances, merchants with menus, orders."""

    SAVED = ("users", "logged_in_users", "orders")

    def __init__(self) -> None:
        super().__init__()
        self.users = {name: {"user_id": uid, "password": password, "balance": balance}
                      for name, (uid, password, balance) in _FOOD_USERS.items()}
        self.merchant_list = {
            name: {"merchant_id": mid, "service_type": kind,
                   "menu": [{"product": p, "price": price} for p, price in menu]}
            for name, (mid, kind, menu) in _MERCHANTS.items()}
        self.logged_in_users: list[Any] = []
        self.orders: list[dict[str, Any]] = []

    def load(self, config: dict[str, Any]) -> None:
        super().load(config)
        self.logged_in_users = list(config.get("logged_in_users", []))

    def login_food_platform(self, username: str, password: str) -> Result:
        if not self.wifi:
            return fail("Wi-Fi is not enabled, unable to login")
        if not isinstance(username, str) or username not in self.users:
            return fail("User does not exist")
        if self.users[username]["password"] != password:
            return fail("Incorrect password")
        if username in self.logged_in_users:
            return fail(f"{username} is already logged in")
        self.logged_in_users.append(username)
        return {"status": True, "message": f"User {username} has successfully logged in!"}

    def check_balance(self, user_name: str) -> float:
        user = self.users.get(user_name) if isinstance(user_name, str) else None
        return user["balance"] if user else 0.0

    def add_food_delivery_order(self, username: str, merchant_name: str,
                                items: list[dict[str, Any]]) -> Result:
        if username not in self.logged_in_users:
            return fail(f"User {username} is not logged in to the food platform")
        merchant = self.merchant_list.get(merchant_name) if isinstance(merchant_name, str) else None
        if merchant is None:
            return fail("Merchant does not exist")
        prices = {entry["product"]: entry["price"] for entry in merchant["menu"]}
        total, lines = 0.0, []
        for item in items:
            product, quantity = item.get("product"), item.get("quantity", 1)
            if not isinstance(quantity, int) or quantity <= 0:
                return fail(f"Invalid quantity {quantity} for product {product}")
            if not isinstance(product, str) or product not in prices:
                return fail(f"Product {product} does not exist in {merchant_name}'s menu")
            total += prices[product] * quantity
            lines.append({"product": product, "quantity": quantity,
                          "price_per_unit": prices[product]})
        if total > self.users[username]["balance"]:
            return fail("Insufficient balance to place the order")
        self.users[username]["balance"] -= total
        self.orders.append({"user_name": username, "merchant_name": merchant_name,
                            "items": lines, "total_price": total})
        return {"status": True, "message": f"Food delivery order successfully placed with "
                                           f"{merchant_name}. Total amount: {total} yuan"}

    def get_products(self, merchant_name: str) -> list[dict[str, Any]] | Result:
        merchant = self.merchant_list.get(merchant_name) if isinstance(merchant_name, str) else None
        if merchant is None:
            return fail(f"Merchant '{merchant_name}' does not exist")
        return copy.deepcopy(merchant["menu"])
