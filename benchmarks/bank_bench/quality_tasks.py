"""The templated tasks of part (c) of the bank benchmark: 8 everyday-assistant domains.

Each domain has 6 phrasings that fill the bank and 3 held-out phrasings with other wording,
used only as queries, so that a retriever cannot score well by matching template words alone.
Slots (names, amounts, cities, ...) are filled from a seeded ``random.Random``, so the same
seed gives the same tasks.
"""

from __future__ import annotations

import random

NAMES = ["Alice", "Bob", "Carlos", "Dana", "Emeka", "Fatima", "Grace", "Hiro", "Ines", "Jonas"]
CITIES = ["Paris", "Tokyo", "Lisbon", "Denver", "Nairobi", "Oslo", "Lima", "Seoul", "Cairo"]
DAYS = ["Monday", "Tuesday", "Friday", "tomorrow", "next week", "the 14th", "Sunday morning"]
# Per domain: phrasings used for the bank, then (after "|") held-out phrasings with other
# wording, used only for queries, so that matching template words is not enough.
DOMAINS: dict[str, tuple[list[str], list[str]]] = {
    "banking": ([
        "Transfer {amt} dollars from my checking account to {name}.",
        "What's the current balance on my savings account?",
        "Pay my {bill} bill of ${amt} from the joint account.",
        "Show the last {k} card transactions over ${amt}.",
        "Move ${amt} into savings every {day} starting {day2}.",
        "Freeze my debit card, I think I lost it in {city}.",
    ], [
        "Wire {amt} bucks to {name}, please.",
        "How much money do I have left?",
        "Did {name}'s reimbursement of {amt} euros come through yet?",
    ]),
    "calendar": ([
        "Schedule a meeting with {name} on {day} at {hour}.",
        "Move my {appt} appointment from {day} to {day2}.",
        "What events do I have on {day}?",
        "Cancel the {appt} on {day} and tell {name}.",
        "Find a free {k}-hour slot for {name} and me {day}.",
        "Add a reminder for {name}'s birthday on {day}.",
    ], [
        "Put a call with {name} on my agenda for {day}.",
        "Am I busy {day} around {hour}?",
        "Push the {appt} back by a week.",
    ]),
    "shopping": ([
        "Order {k} packs of {item} and ship them to my home address.",
        "Add a {item} under ${amt} to my cart.",
        "Where is my order of {item}? It was due {day}.",
        "Return the {item} I bought last week and get a refund.",
        "Compare prices for {item} and buy the cheapest one.",
        "Apply the discount code SAVE{k} to my basket with the {item}.",
    ], [
        "I want my money back for the broken {item}.",
        "Has the parcel with the {item} shipped?",
        "Get me {item}, whatever is least expensive online.",
    ]),
    "travel": ([
        "Book a flight from {city} to {city2} on {day}.",
        "Find a hotel in {city} for {k} nights under ${amt} per night.",
        "Rent a car at the {city} airport from {day} to {day2}.",
        "Is my flight to {city2} on {day} delayed?",
        "Change my return train from {city} to {day2}.",
        "Get me a window seat on the {city}-{city2} flight.",
    ], [
        "I need plane tickets and somewhere to stay in {city}.",
        "Will I land in {city2} on time {day}?",
        "Reserve a room near the old town in {city} for {k} nights.",
    ]),
    "file_system": ([
        "Move {file} into the {folder} folder.",
        "Delete all {ext} files older than {k} days in {folder}.",
        "Create a directory called {folder} under my home directory.",
        "Find every file named {file} on the disk.",
        "Rename {file} to {file2} and copy it to {folder}.",
        "How much disk space does the {folder} directory use?",
    ], [
        "Clean up the old {ext} logs, they are eating my storage.",
        "Where did I save {file}?",
        "Zip up everything in {folder} so I can back it up.",
    ]),
    "smart_home": ([
        "Turn off the lights in the {room}.",
        "Set the thermostat in the {room} to {temp} degrees.",
        "Lock the front door and arm the alarm at {hour}.",
        "Dim the {room} lamps to {k}0 percent.",
        "Start the robot vacuum in the {room} when I leave.",
        "Play relaxing music on the {room} speaker.",
    ], [
        "It's too cold in the {room}, warm it up.",
        "Make it darker in the {room}.",
        "Did I leave the garage open?",
    ]),
    "email": ([
        "Email {name} the {doc} before {day}.",
        "Reply to {name}'s last message saying I'll be late.",
        "Find the email from {name} about the {doc}.",
        "Forward the {doc} thread to {name2} and cc {name}.",
        "Draft a thank-you note to {name} for the {doc}.",
        "Mark all unread newsletters as read and archive them.",
    ], [
        "Let {name} know in writing that the {doc} is attached.",
        "Anything new in my inbox from {name}?",
        "Write back to {name2}: I can't make it {day}.",
    ]),
    "food_delivery": ([
        "Order a large {food} from the nearest place, delivered by {hour}.",
        "Reorder my usual {food} from last {day}.",
        "Find a restaurant that delivers {food} to {city} street.",
        "How long until my {food} delivery arrives?",
        "Add extra cheese to my {food} order and tip ${k}.",
        "Get {k} {food} meals for the team lunch {day}.",
    ], [
        "I'm hungry, get me some {food} for dinner.",
        "Where's the courier with my {food}?",
        "Lunch for {k} people at the office, {food} is fine.",
    ]),
}
SLOTS = {
    "amt": lambda r: str(r.choice([20, 45, 120, 300, 75, 1500])), "name": lambda r: r.choice(NAMES),
    "name2": lambda r: r.choice(NAMES), "city": lambda r: r.choice(CITIES),
    "city2": lambda r: r.choice(CITIES), "day": lambda r: r.choice(DAYS),
    "day2": lambda r: r.choice(DAYS), "k": lambda r: str(r.randint(2, 9)),
    "hour": lambda r: r.choice(["9am", "noon", "3pm", "6:30pm", "8pm"]),
    "bill": lambda r: r.choice(["electricity", "phone", "internet", "water"]),
    "appt": lambda r: r.choice(["dentist", "doctor", "haircut", "standup", "review"]),
    "item": lambda r: r.choice(["AA batteries", "running shoes", "coffee beans", "a desk lamp",
                                "headphones", "printer paper"]),
    "month": lambda r: r.choice(["March", "June", "October"]),
    "file": lambda r: r.choice(["report.pdf", "notes.txt", "budget.xlsx", "photo.jpg"]),
    "file2": lambda r: r.choice(["final.pdf", "old_notes.txt", "q3.xlsx"]),
    "folder": lambda r: r.choice(["archive", "projects", "Downloads", "backup", "tmp"]),
    "ext": lambda r: r.choice([".log", ".tmp", ".bak"]),
    "room": lambda r: r.choice(["living room", "kitchen", "bedroom", "office", "hallway"]),
    "temp": lambda r: str(r.randint(17, 24)),
    "doc": lambda r: r.choice(["invoice", "contract", "slides", "meeting notes", "proposal"]),
    "food": lambda r: r.choice(["pizza", "sushi", "pad thai", "burrito", "ramen", "salad"]),
}


def generate_tasks(n_per_domain: int, seed: int, held_out: bool = False
                   ) -> list[tuple[str, str]]:
    """``(domain, text)`` pairs: each domain's bank (or held-out) phrasings filled with random
    entities, every phrasing used at least once."""
    r = random.Random(seed)
    out = []
    for domain, (seen, unseen) in DOMAINS.items():
        templates = unseen if held_out else seen
        for i in range(n_per_domain):
            tpl = templates[i] if i < len(templates) else r.choice(templates)
            out.append((domain, tpl.format(**{k: f(r) for k, f in SLOTS.items()})))
    return out
