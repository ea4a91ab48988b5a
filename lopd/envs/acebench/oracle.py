"""Oracle paths of the ACEBench agent tasks: each task's first milestone path, fixed where it
cannot reach the task's own expected end state.

Replayed literally, 9 of the 50 milestone paths miss their ``ground_truth``; each fix below
is the smallest change that reaches it, and follows the task's text:

- ``full_product_name`` (multi-step 0, 1): the path orders "Super Supreme", which is not on
  Domino's menu; the expected order is a "Super Supreme Pizza";
- ``food_login`` (multi-step 12, 13): the path orders without logging in to the food
  platform; the expected state has Helen logged in and her order placed;
- ``delete_latest`` (multi-step 14-17): the task says to delete the most recent message when
  the inbox is full, and the expected inbox lacks message 4 (the latest), but the path deletes
  the earliest (3);
- ``device_login`` (multi-step 16, multi-turn 6): the device starts logged out and the path
  never logs in, so every message and reminder call fails; the expected state is logged in.

These fixes change only the oracle (``task.reference`` and the replay test); the process
score still uses the published milestones, as ACEBench does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

Call = tuple[str, dict[str, Any]]


def _full_product_name(calls: list[Call]) -> list[Call]:
    out = copy.deepcopy(calls)
    for name, args in out:
        for item in args.get("items", []) if name == "add_food_delivery_order" else []:
            if item.get("product") == "Super Supreme":
                item["product"] = "Super Supreme Pizza"
    return out


def _food_login(calls: list[Call]) -> list[Call]:
    index = next(i for i, (name, _) in enumerate(calls) if name == "add_food_delivery_order")
    login = ("login_food_platform", {"username": "Helen", "password": "password321"})
    return calls[:index] + [login] + calls[index:]


def _delete_latest(calls: list[Call]) -> list[Call]:
    out = []
    for name, args in calls:
        if name == "get_earliest_message_id":
            out.append(("get_latest_message_id", {}))
        elif name == "delete_message" and args == {"message_id": 3}:
            out.append(("delete_message", {"message_id": 4}))
        else:
            out.append((name, args))
    return out


def _device_login(calls: list[Call]) -> list[Call]:
    return [("login_device", {})] + list(calls)


FIXES: dict[str, Callable[[list[Call]], list[Call]]] = {
    "full_product_name": _full_product_name, "food_login": _food_login,
    "delete_latest": _delete_latest, "device_login": _device_login}
ORACLE_FIXES: dict[str, tuple[str, ...]] = {
    "agent_multi_step_0": ("full_product_name",),
    "agent_multi_step_1": ("full_product_name",),
    "agent_multi_step_12": ("food_login",),
    "agent_multi_step_13": ("food_login",),
    "agent_multi_step_14": ("delete_latest",),
    "agent_multi_step_15": ("delete_latest",),
    "agent_multi_step_16": ("device_login", "delete_latest"),
    "agent_multi_step_17": ("delete_latest",),
    "agent_multi_turn_6": ("device_login",),
}


def fixed_path(entry_id: str, calls: list[Call]) -> list[Call]:
    """``calls`` (a task's milestone path) with the task's fixes applied."""
    for fix in ORACLE_FIXES.get(entry_id, ()):
        calls = FIXES[fix](calls)
    return calls
