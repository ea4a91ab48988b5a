"""A to-do list service with six tools: the environment of the worked example.

Nothing here is part of lopd: it is the kind of code a user brings. The class holds its state
in ``self.state`` (plain JSON data); every public method is a tool whose schema lopd derives
from the type hints and the docstring. ``ToolError`` is an expected failure that the model
reads back as ``{"error": ...}``.

State: ``{"lists": [names], "items": {id: {"title", "list", "done", "priority", "due"}},
"next_id": int}``.
"""

from __future__ import annotations

import datetime
from typing import Literal

from lopd.envs.function_env import ToolService
from lopd.tools import ToolError

Priority = Literal["low", "normal", "high"]


class TodoService(ToolService):
    description = "a to-do list service"
    example = ("find_items", {"text": "milk"})

    def _item(self, item_id: str) -> dict:
        item = self.state["items"].get(item_id)
        if item is None:
            raise ToolError(f"no item with id '{item_id}'; use find_items to look ids up")
        return item

    def list_lists(self) -> dict:
        """List the to-do lists and how many open items each holds."""
        open_items = [i["list"] for i in self.state["items"].values() if not i["done"]]
        return {"lists": [{"name": n, "open": open_items.count(n)} for n in self.state["lists"]]}

    def find_items(self, text: str, list_name: str | None = None) -> dict:
        """Find items whose title contains some text.

        Args:
            text: Part of the title, e.g. 'milk'.
            list_name: Only search this list.
        """
        found = [{"id": key, **item} for key, item in self.state["items"].items()
                 if text.lower() in item["title"].lower()
                 and (list_name is None or item["list"] == list_name)]
        if not found:
            raise ToolError(f"no item matches '{text}'")
        return {"items": found}

    def add_item(self, list_name: str, title: str, priority: Priority = "normal",
                 due: str | None = None) -> dict:
        """Add an item to a list.

        Args:
            list_name: The list, e.g. 'groceries'.
            title: What to do.
            priority: low, normal or high.
            due: Due date as YYYY-MM-DD.
        """
        if list_name not in self.state["lists"]:
            raise ToolError(f"no list '{list_name}' (lists: {', '.join(self.state['lists'])})")
        if due is not None:
            _check_date(due)
        item_id = f"T-{self.state['next_id']}"
        self.state["next_id"] += 1
        self.state["items"][item_id] = {"title": title, "list": list_name, "done": False,
                                        "priority": priority, "due": due}
        return {"id": item_id}

    def complete_item(self, item_id: str) -> dict:
        """Mark an item as done.

        Args:
            item_id: The item's id, e.g. 'T-104'.
        """
        self._item(item_id)["done"] = True
        return {"id": item_id, "done": True}

    def set_due_date(self, item_id: str, due: str) -> dict:
        """Set an item's due date.

        Args:
            item_id: The item's id, e.g. 'T-104'.
            due: Due date as YYYY-MM-DD.
        """
        _check_date(due)
        self._item(item_id)["due"] = due
        return {"id": item_id, "due": due}

    def delete_item(self, item_id: str) -> dict:
        """Delete an item.

        Args:
            item_id: The item's id, e.g. 'T-104'.
        """
        self._item(item_id)
        del self.state["items"][item_id]
        return {"deleted": item_id}


def _check_date(text: str) -> None:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        raise ToolError(f"'{text}' is not a date in YYYY-MM-DD form") from None
