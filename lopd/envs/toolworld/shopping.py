"""ToolWorld domain: an online shop (catalog search, cart, coupons, checkout).

Tiers: 1 = one call with the product id or coupon code in the goal; 2 = find a product (or
look in the cart), then add/remove it; 3 = buy one product (search, add, checkout); 4 = add two
products found by name; 5 = order two products (two searches, two adds, checkout).
"""

from __future__ import annotations

import random

from lopd.envs.toolworld.base import (
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

_PID = Param("string", "Product id, e.g. 'P-1001'.")
_CATALOG = [
    ("wireless mouse", "electronics"), ("usb-c cable", "electronics"), ("desk lamp", "home"),
    ("coffee mug", "kitchen"), ("water bottle", "sports"), ("yoga mat", "sports"),
    ("notebook", "office"), ("gel pen", "office"), ("phone stand", "electronics"),
    ("tea kettle", "kitchen"), ("throw pillow", "home"), ("running socks", "sports"),
    ("laptop sleeve", "electronics"), ("cutting board", "kitchen"), ("wall clock", "home"),
]
_COUPONS = {"SAVE10": 10, "WELCOME5": 5, "SPRING15": 15, "VIP20": 20}


class Shopping(Domain):
    name = "shopping"
    description = "an online shop"
    example = ("search_products", {"query": "lamp"})

    def _product(self, product_id: str) -> dict:
        return self._lookup("products", product_id, "product")

    @tool("Search the catalog; returns product ids, names and prices.",
          query=Param("string", "Words to look for in product names."))
    def search_products(self, query: str) -> dict:
        rows = [{"product_id": k, "name": p["name"], "price": p["price"]}
                for k, p in self.state["products"].items() if query.lower() in p["name"]]
        return {"results": rows}

    @tool("Get a product's details, including how many are in stock.", product_id=_PID)
    def get_product(self, product_id: str) -> dict:
        return {"product_id": product_id, **self._product(product_id)}

    @tool("Add a quantity of a product to the cart.", product_id=_PID,
          quantity=Param("integer", "How many to add (at least 1).", minimum=1,
                         maximum=MAX_COUNT))
    def add_to_cart(self, product_id: str, quantity: int) -> dict:
        product = self._product(product_id)
        if quantity < 1:
            raise ToolError("quantity must be at least 1")
        in_cart = self.state["cart"].get(product_id, 0)
        if in_cart + quantity > product["stock"]:
            raise ToolError(f"only {product['stock']} of '{product_id}' in stock")
        self.state["cart"][product_id] = in_cart + quantity
        return {"product_id": product_id, "quantity_in_cart": in_cart + quantity}

    @tool("Remove a product from the cart entirely.", product_id=_PID)
    def remove_from_cart(self, product_id: str) -> dict:
        if product_id not in self.state["cart"]:
            raise ToolError(f"'{product_id}' is not in the cart")
        del self.state["cart"][product_id]
        return {"product_id": product_id, "removed": True}

    @tool("Show the cart: items, quantities and subtotal.")
    def view_cart(self) -> dict:
        products = self.state["products"]
        items = [{"product_id": k, "name": products[k]["name"], "quantity": q}
                 for k, q in self.state["cart"].items()]
        return {"items": items, "subtotal": self._subtotal(), "coupon": self.state["coupon"]}

    def _subtotal(self) -> float:
        products = self.state["products"]
        return money(sum(products[k]["price"] * q for k, q in self.state["cart"].items()))

    @tool("Apply a coupon code to the cart.", code=Param("string", "Coupon code, e.g. 'SAVE10'."))
    def apply_coupon(self, code: str) -> dict:
        if code not in _COUPONS:
            raise ToolError(f"invalid coupon '{code}'")
        self.state["coupon"] = code
        return {"coupon": code, "percent_off": _COUPONS[code]}

    @tool("Place an order for everything in the cart.")
    def checkout(self) -> dict:
        cart = self.state["cart"]
        if not cart:
            raise ToolError("the cart is empty")
        discount = _COUPONS.get(self.state["coupon"] or "", 0)
        total = money(self._subtotal() * (100 - discount) / 100)
        for product_id, quantity in cart.items():
            self.state["products"][product_id]["stock"] -= quantity
        order = {"order_id": f"O-{len(self.state['orders']) + 1}", "items": dict(cart),
                 "total": total, "coupon": self.state["coupon"]}
        self.state["orders"].append(order)
        self.state["cart"], self.state["coupon"] = {}, None
        return order

    def domain_problems(self) -> list[str]:
        products = self.state["products"]
        problems = []
        for key, product in products.items():
            if not is_count(product["stock"]):
                problems.append(f"{key}: stock {product['stock']!r} is not a count >= 0")
            if not is_amount(product["price"], positive=True):
                problems.append(f"{key}: price {product['price']!r} is not a positive amount")
        for key, quantity in self.state["cart"].items():
            if key not in products:
                problems.append(f"cart holds unknown product {key!r}")
            elif not is_count(quantity, 1, products[key]["stock"]):
                problems.append(f"cart quantity of {key} ({quantity!r}) is not 1..stock")
        if self.state["coupon"] is not None and self.state["coupon"] not in _COUPONS:
            problems.append(f"unknown coupon {self.state['coupon']!r}")
        return problems

    @staticmethod
    def generate(rng: random.Random, tier: int) -> TaskSpec:
        entries = rng.sample(_CATALOG, 8)
        ids = rng.sample(range(1000, 9999), 8)
        products = {f"P-{i}": {"name": n, "category": c, "price": rng.randrange(300, 6000) / 100,
                               "stock": rng.randrange(5, 40)} for i, (n, c) in zip(ids, entries)}
        state = {"products": products, "cart": {}, "coupon": None, "orders": []}
        keys = sorted(products)
        if tier <= 2:
            for key in rng.sample(keys, 2):
                state["cart"][key] = rng.randrange(1, 3)
        maker = {1: _tier12, 2: _tier12, 3: _tier35, 4: _tier4, 5: _tier35}[tier]
        return maker(rng, state, keys, tier)


def _cart_guard(touched):
    return guard_others("cart_rest", "cart item", ("cart",), touched)


def _tier12(rng, state, keys, tier):
    products, cart = state["products"], state["cart"]
    action = rng.choice(["add", "remove", "coupon"] if tier == 1 else ["add", "remove"])
    if action == "coupon":
        code = rng.choice(sorted(_COUPONS))
        goal = pick(rng, ["Apply the coupon {c} to my cart.", "Use coupon code {c}.",
                          "I have a coupon, {c}; please apply it."], c=code)
        checks = [Check("coupon", f"coupon {code} applied", "eq", ("coupon",), code),
                  Check("cart_same", "cart unchanged", "unchanged", ("cart",), guard=True)]
        return TaskSpec(goal, state, checks, [("apply_coupon", {"code": code})], tier)
    if action == "add":
        key = rng.choice([k for k in keys if k not in cart])
        quantity = rng.randrange(1, 4)
        who = f"product {key}" if tier == 1 else f"{products[key]['name']}"
        goal = pick(rng, ["Add {q} x {w} to my cart.", "Put {q} of {w} in the cart.",
                          "I want {q} units of {w}; add them to my cart."], q=quantity, w=who)
        checks = [Check("in_cart", f"{quantity} of {key} in the cart", "eq", ("cart", key),
                        quantity), _cart_guard([key])]
        call = ("add_to_cart", {"product_id": key, "quantity": quantity})
        lookup = ("search_products", {"query": products[key]["name"]})
    else:
        key = rng.choice(sorted(cart))
        who = f"product {key}" if tier == 1 else f"the {products[key]['name']}"
        goal = pick(rng, ["Remove {w} from my cart.", "Take {w} out of the cart.",
                          "I changed my mind about {w}; drop it from the cart."], w=who)
        checks = [Check("removed", f"{key} not in the cart", "missing", ("cart", key)),
                  _cart_guard([key])]
        call = ("remove_from_cart", {"product_id": key})
        lookup = ("view_cart", {})
    calls = [call] if tier == 1 else [lookup, call]
    return TaskSpec(goal, state, checks, calls, tier)


def _order_checks(state, wanted):
    products = state["products"]
    checks = [Check("ordered", f"one order with exactly {wanted}", "match", ("orders",),
                    {"items": wanted}),
              Check("one_order", "exactly one order placed", "count", ("orders",), 1)]
    for key, quantity in wanted.items():
        stock = products[key]["stock"] - quantity
        checks.append(Check(f"stock_{key}", f"{key} stock is {stock}", "eq",
                            ("products", key, "stock"), stock))
    checks.append(guard_others("others_unchanged", "product", ("products",), list(wanted)))
    return checks


def _tier35(rng, state, keys, tier):
    products = state["products"]
    chosen = rng.sample(keys, 1 if tier == 3 else 2)
    wanted = {k: rng.randrange(1, 4) for k in chosen}
    described = " and ".join(f"{q} x {products[k]['name']}" for k, q in wanted.items())
    goal = pick(rng, ["Buy {d} for me (add to the cart and check out).",
                      "Please order {d}.", "Place an order for {d}."], d=described)
    searches = [("search_products", {"query": products[k]["name"]}) for k in chosen]
    adds = [("add_to_cart", {"product_id": k, "quantity": q}) for k, q in wanted.items()]
    if tier == 3:
        calls = [searches[0], adds[0], ("checkout", {})]
    else:
        calls = [*searches, *adds, ("checkout", {})]
    return TaskSpec(goal, state, _order_checks(state, wanted), calls, tier)


def _tier4(rng, state, keys, tier):
    products = state["products"]
    chosen = rng.sample(keys, 2)
    wanted = {k: rng.randrange(1, 4) for k in chosen}
    described = " and ".join(f"{q} x {products[k]['name']}" for k, q in wanted.items())
    goal = pick(rng, ["Add {d} to my cart (do not check out yet).",
                      "Put {d} in my shopping cart; I will pay later."], d=described)
    checks = [Check(f"cart_{k}", f"{q} of {k} in the cart", "eq", ("cart", k), q)
              for k, q in wanted.items()]
    checks += [_cart_guard(chosen), Check("no_order", "no order placed", "count", ("orders",), 0,
                                          guard=True)]
    calls = [("search_products", {"query": products[k]["name"]}) for k in chosen]
    calls += [("add_to_cart", {"product_id": k, "quantity": q}) for k, q in wanted.items()]
    return TaskSpec(goal, state, checks, calls, tier)
