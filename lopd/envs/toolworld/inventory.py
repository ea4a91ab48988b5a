"""ToolWorld domain: a warehouse inventory (stock levels, prices, storage locations).

Tiers: 1 = one call with the SKU in the goal; 2 = find an item by name, then act; 3 = bring an
item's stock to a target level (find, read, adjust); 4 = copy another item's price (two finds,
a read, a write); 5 = tier 4 plus moving the item to the other item's location.
"""

from __future__ import annotations

import random

from lopd.envs.toolworld.base import (
    MAX_AMOUNT,
    MAX_COUNT,
    Check,
    Domain,
    Param,
    TaskSpec,
    ToolError,
    guard_others,
    is_amount,
    is_count,
    money,
    pick,
    tool,
)

_SKU = Param("string", "Item SKU, e.g. 'SKU-1042'.")
_ITEMS = [
    "blue widget", "red gadget", "steel bolt", "copper wire", "rubber gasket", "oak plank",
    "glass jar", "paper towel", "nylon rope", "brass hinge", "ceramic tile", "wool blanket",
    "plastic crate", "cotton glove", "led bulb", "zinc screw",
]
_AISLES = [f"{row}{n}" for row in "ABCDE" for n in range(1, 7)]


class Inventory(Domain):
    name = "inventory"
    description = "a warehouse inventory system"
    example = ("find_item", {"name": "steel bolt"})

    def _item(self, sku: str) -> dict:
        return self._lookup("items", sku, "SKU")

    @tool("Find items whose name contains the given text; returns SKUs and names.",
          name=Param("string", "Item name or part of it, e.g. 'widget'."))
    def find_item(self, name: str) -> dict:
        found = [{"sku": k, "name": v["name"]} for k, v in self.state["items"].items()
                 if name.lower() in v["name"].lower()]
        if not found:
            raise ToolError(f"no item matches '{name}'")
        return {"items": found}

    @tool("Get an item's details: stock quantity, price and location.", sku=_SKU)
    def get_item(self, sku: str) -> dict:
        return {"sku": sku, **self._item(sku)}

    @tool("Change an item's stock by a number of units (negative to remove).", sku=_SKU,
          delta=Param("integer", "Units to add (positive) or remove (negative).",
                      minimum=-MAX_COUNT, maximum=MAX_COUNT))
    def adjust_stock(self, sku: str, delta: int) -> dict:
        item = self._item(sku)
        if item["quantity"] + delta < 0:
            raise ToolError(f"only {item['quantity']} units of '{sku}' in stock")
        item["quantity"] += delta
        return {"sku": sku, "quantity": item["quantity"]}

    @tool("Set an item's unit price.", sku=_SKU,
          price=Param("number", "New unit price in dollars, greater than 0.", above=0,
                      maximum=MAX_AMOUNT))
    def set_price(self, sku: str, price: float) -> dict:
        if not money(price) > 0:
            raise ToolError("price must be at least 0.01")
        self._item(sku)["price"] = money(price)
        return {"sku": sku, "price": money(price)}

    @tool("Move an item to another storage location.", sku=_SKU,
          location=Param("string", "Aisle code, e.g. 'B3'."))
    def move_item(self, sku: str, location: str) -> dict:
        if location not in _AISLES:
            raise ToolError(f"unknown location '{location}' (aisles A1..E6)")
        self._item(sku)["location"] = location
        return {"sku": sku, "location": location}

    @tool("List items whose stock is below a threshold.",
          threshold=Param("integer", "Stock level; items with fewer units are listed.",
                          minimum=-MAX_COUNT, maximum=MAX_COUNT))
    def list_low_stock(self, threshold: int) -> dict:
        rows = [{"sku": k, "name": v["name"], "quantity": v["quantity"]}
                for k, v in self.state["items"].items() if v["quantity"] < threshold]
        return {"items": rows}

    def domain_problems(self) -> list[str]:
        problems = []
        for sku, item in self.state["items"].items():
            if not is_count(item["quantity"]):
                problems.append(f"{sku}: quantity {item['quantity']!r} is not a count >= 0")
            if not is_amount(item["price"], positive=True):
                problems.append(f"{sku}: price {item['price']!r} is not a positive amount")
            if item["location"] not in _AISLES:
                problems.append(f"{sku}: unknown location {item['location']!r}")
        return problems

    @staticmethod
    def generate(rng: random.Random, tier: int) -> TaskSpec:
        names = rng.sample(_ITEMS, 7)
        skus = rng.sample(range(1000, 9999), 7)
        items = {}
        for name, number in zip(names, skus):
            items[f"SKU-{number}"] = {
                "name": name, "quantity": rng.randrange(0, 200),
                "price": rng.randrange(100, 9000) / 100, "location": rng.choice(_AISLES),
            }
        state = {"items": items}
        keys = sorted(items)
        sku, other = rng.sample(keys, 2)
        maker = {1: _tier12, 2: _tier12, 3: _tier3, 4: _tier45, 5: _tier45}[tier]
        return maker(rng, state, sku, other, tier)


def _field_check(sku: str, field: str, value) -> Check:
    return Check(f"{field}_{sku}", f"{sku} has {field} {value}", "eq", ("items", sku, field), value)


def _tier12(rng, state, sku, other, tier):
    item = state["items"][sku]
    who = f"item {sku}" if tier == 1 else f"the {item['name']}"
    action = rng.choice(["stock", "price", "move"])
    if action == "stock":
        delta = rng.randrange(5, 60)
        goal = pick(rng, ["Add {d} units of {w} to the stock.", ("We received {d} more of {w}; "
                          "update the stock."), "Increase the stock of {w} by {d} units."],
                    d=delta, w=who)
        call = ("adjust_stock", {"sku": sku, "delta": delta})
        check = _field_check(sku, "quantity", item["quantity"] + delta)
    elif action == "price":
        price = rng.randrange(100, 9000) / 100
        goal = pick(rng, ["Set the price of {w} to ${p:.2f}.", ("Change the unit price of {w} to "
                          "${p:.2f}."), "{W} should now cost ${p:.2f}."],
                    w=who, W=who[0].upper() + who[1:], p=price)
        call = ("set_price", {"sku": sku, "price": price})
        check = _field_check(sku, "price", price)
    else:
        location = rng.choice([a for a in _AISLES if a != item["location"]])
        goal = pick(rng, ["Move {w} to aisle {l}.", "Store {w} in location {l} from now on.",
                          "Relocate {w} to {l}."], w=who, l=location)
        call = ("move_item", {"sku": sku, "location": location})
        check = _field_check(sku, "location", location)
    calls = [call] if tier == 1 else [("find_item", {"name": item["name"]}), call]
    guard = guard_others("others_unchanged", "item", ("items",), [sku])
    return TaskSpec(goal, state, [check, guard], calls, tier)


def _tier3(rng, state, sku, other, tier):
    item = state["items"][sku]
    target = item["quantity"] + rng.randrange(10, 150)
    goal = pick(rng, ["Restock the {n} so that exactly {t} units are in stock.",
                      "Bring the stock of the {n} up to {t} units.",
                      "We want {t} units of the {n} on hand; adjust the stock accordingly."],
                n=item["name"], t=target)
    calls = [("find_item", {"name": item["name"]}), ("get_item", {"sku": sku}),
             ("adjust_stock", {"sku": sku, "delta": target - item["quantity"]})]
    checks = [_field_check(sku, "quantity", target),
              guard_others("others_unchanged", "item", ("items",), [sku])]
    return TaskSpec(goal, state, checks, calls, tier)


def _tier45(rng, state, sku, other, tier):
    item, model = state["items"][sku], state["items"][other]
    fields = {"a": item["name"], "b": model["name"]}
    if tier == 4:
        goal = pick(rng, ["Set the price of the {a} to the same price as the {b}.",
                          "Make the {a} cost exactly what the {b} costs."], **fields)
    else:
        goal = pick(rng, [
            ("Set the price of the {a} to the price of the {b}, and store the {a} in the same "
            "location as the {b}."),
            "Match the {a} to the {b}: same unit price and same storage location.",
        ], **fields)
    calls = [("find_item", {"name": item["name"]}), ("find_item", {"name": model["name"]}),
             ("get_item", {"sku": other}), ("set_price", {"sku": sku, "price": model["price"]})]
    checks = [_field_check(sku, "price", model["price"])]
    if tier == 5:
        calls.append(("move_item", {"sku": sku, "location": model["location"]}))
        checks.append(_field_check(sku, "location", model["location"]))
    checks.append(guard_others("others_unchanged", "item", ("items",), [sku]))
    return TaskSpec(goal, state, checks, calls, tier)
