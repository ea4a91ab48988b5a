"""Generated tasks for the to-do service: task files, and the same tasks as a plugin suite.

Each task is drawn from a seeded ``random.Random`` (the seed comes from the split and the
index), so the files are reproducible. Four kinds, each with a reference solution and a
checklist on the final state: add an item (one call), and complete, delete or re-date an item
found by its title (two calls: ``find_items`` then the change, with the id read from the
first result). Guard checks make sure nothing else changed.

    python examples/todo_service/tasks.py          # writes data/train.jsonl and data/test.jsonl

As a plugin suite: ``examples/todo_service/tasks.py:suite:train`` (or ``:test``).
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
LISTS = ["groceries", "work", "home", "errands"]
TITLES = {
    "groceries": ["buy milk", "buy eggs", "get bread", "buy coffee beans", "get apples",
                  "buy rice", "get olive oil", "buy cheese"],
    "work": ["send the report", "book the meeting room", "review the budget", "call the client",
             "update the slides", "answer Maria's email", "plan the sprint", "fix the printer"],
    "home": ["water the plants", "clean the oven", "fix the shelf", "pay the rent",
             "wash the car", "call the plumber", "sort the mail", "change the light bulb"],
    "errands": ["pick up the parcel", "return the library books", "renew the passport",
                "drop off the dry cleaning", "get a haircut", "post the letter",
                "refill the prescription", "buy a birthday card"],
}
SIZES = {"train": 240, "test": 40}


def _date(rng: random.Random) -> str:
    return f"2026-{rng.choice([11, 12]):02d}-{rng.randrange(1, 29):02d}"


def _state(rng: random.Random) -> dict:
    items, next_id = {}, rng.randrange(100, 900)
    for list_name in LISTS:
        for title in rng.sample(TITLES[list_name], rng.randrange(1, 3)):
            items[f"T-{next_id}"] = {"title": title, "list": list_name, "done": False,
                                     "priority": rng.choice(["low", "normal", "high"]),
                                     "due": _date(rng) if rng.random() < 0.5 else None}
            next_id += rng.randrange(1, 4)
    return {"lists": list(LISTS), "items": items, "next_id": next_id}


def _add(rng: random.Random, state: dict) -> tuple[str, list, list]:
    list_name = rng.choice(LISTS)
    taken = {i["title"] for i in state["items"].values()}
    title = rng.choice([t for t in TITLES[list_name] if t not in taken])
    arguments = {"list_name": list_name, "title": title}
    fields = {"title": title, "list": list_name, "done": False, "priority": "normal"}
    extra = rng.choice(["", "priority", "due"])
    prompt = rng.choice(["Add '{t}' to my {l} list.", "Put '{t}' on the {l} list.",
                         "Please add '{t}' to {l}."]).format(t=title, l=list_name)
    if extra == "priority":
        arguments["priority"] = fields["priority"] = rng.choice(["low", "high"])
        prompt = prompt[:-1] + f" with {arguments['priority']} priority."
    elif extra == "due":
        arguments["due"] = fields["due"] = _date(rng)
        prompt = prompt[:-1] + f", due {arguments['due']}."
    checks = [{"name": "added", "description": f"'{title}' is on {list_name}", "op": "match",
               "path": ["items"], "value": fields},
              {"name": "one_new", "description": "exactly one item was added", "op": "count",
               "path": ["items"], "value": len(state["items"]) + 1, "guard": True},
              {"name": "others_kept", "description": "no other item changed",
               "op": "kept_except", "path": ["items"], "value": [], "guard": True}]
    return prompt, [{"name": "add_item", "arguments": arguments}], checks


def _change(rng: random.Random, state: dict) -> tuple[str, list, list]:
    item_id = rng.choice(sorted(state["items"]))
    title = state["items"][item_id]["title"]
    kind = rng.choice(["complete", "delete", "due"])
    find = {"name": "find_items", "arguments": {"text": title}}
    if kind == "complete":
        prompt = rng.choice(["Mark '{t}' as done.", "I finished '{t}', tick it off.",
                             "Complete the item '{t}'."]).format(t=title)
        call = {"name": "complete_item", "arguments": {"item_id": item_id}}
        goal = {"op": "eq", "path": ["items", item_id, "done"], "value": True}
    elif kind == "delete":
        prompt = rng.choice(["Delete '{t}' from my lists.", "Remove the item '{t}'.",
                             "I no longer need '{t}', delete it."]).format(t=title)
        call = {"name": "delete_item", "arguments": {"item_id": item_id}}
        goal = {"op": "missing", "path": ["items", item_id]}
    else:
        due = _date(rng)
        while due == state["items"][item_id]["due"]:  # a no-op task would pass untouched
            due = _date(rng)
        prompt = rng.choice(["Set the due date of '{t}' to {d}.", "'{t}' is now due {d}.",
                             "Move '{t}' to {d}."]).format(t=title, d=due)
        call = {"name": "set_due_date", "arguments": {"item_id": item_id, "due": due}}
        goal = {"op": "eq", "path": ["items", item_id, "due"], "value": due}
    checks = [{"name": kind, "description": f"{kind} '{title}'", **goal},
              {"name": "others_same", "description": "no other item changed",
               "op": "same_except", "path": ["items"], "value": [item_id], "guard": True}]
    return prompt, [find, call], checks


def task_row(split: str, index: int, toolset: str) -> dict:
    """One task-file row of ``split``."""
    digest = hashlib.sha256(f"todo:{split}:{index}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    state = _state(rng)
    prompt, reference, checks = (_add if rng.random() < 0.4 else _change)(rng, state)
    return {"id": f"todo-{split}-{index}", "prompt": prompt, "toolset": toolset,
            "state": state, "checks": checks, "reference": reference, "split": split,
            "domain": "todo"}


def rows(split: str, toolset: str) -> list[dict]:
    """The split's rows; test prompts that also occur in train are skipped."""
    banned = {r["prompt"] for r in rows("train", toolset)} if split == "test" else set()
    out, index = [], 0
    while len(out) < SIZES[split]:
        row = task_row(split, index, toolset)
        index += 1
        if row["prompt"] not in banned:
            out.append(row)
    return out


def suite(split: str = "train") -> list[dict]:
    """Plugin factory: the split's tasks (rows naming the tool set by absolute path)."""
    return rows(split, f"{HERE / 'service.py'}:TodoService")


def main() -> None:
    for split in SIZES:
        path = HERE / "data" / f"{split}.jsonl"
        path.parent.mkdir(exist_ok=True)
        lines = [json.dumps(r) for r in rows(split, "../service.py:TodoService")]
        path.write_text("\n".join(lines) + "\n")
        print(f"{path}: {len(lines)} tasks")


if __name__ == "__main__":
    main()
