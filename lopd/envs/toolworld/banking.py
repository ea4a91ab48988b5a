"""ToolWorld domain: retail banking (accounts, deposits, withdrawals, transfers, freezes).

Tiers: 1 = one call with the account id in the goal; 2 = find an owner's account, then act;
3 = transfer between two owners' accounts; 4 = transfer an amount computed from a balance;
5 = tier 4 plus freezing the emptied account.
"""

from __future__ import annotations

import random

from lopd.envs.toolworld.base import (
    MAX_AMOUNT,
    NAMES,
    Check,
    Domain,
    Param,
    TaskSpec,
    ToolError,
    guard_others,
    is_amount,
    money,
    pick,
    tool,
)

_ACC = Param("string", "Account id, e.g. 'ACC-1234'.")
_AMOUNT = Param("number", "Amount in dollars, greater than 0.", above=0, maximum=MAX_AMOUNT)


class Banking(Domain):
    name = "banking"
    description = "a bank's account system"
    example = ("get_balance", {"account_id": "ACC-1234"})

    def _account(self, account_id: str) -> dict:
        return self._lookup("accounts", account_id, "account")

    def _usable(self, account_id: str, amount: float) -> dict:
        account = self._account(account_id)
        if account["frozen"]:
            raise ToolError(f"account '{account_id}' is frozen")
        if not money(amount) > 0:
            raise ToolError("amount must be at least 0.01")
        return account

    def domain_problems(self) -> list[str]:
        problems = []
        for key, account in self.state["accounts"].items():
            if not is_amount(account["balance"]):
                problems.append(f"{key}: balance {account['balance']!r} is not a finite amount >= 0")
            if not isinstance(account["frozen"], bool):
                problems.append(f"{key}: 'frozen' is not a boolean")
        for index, row in enumerate(self.state["transactions"]):
            if not is_amount(row["amount"], positive=True):
                problems.append(f"transaction {index}: amount {row['amount']!r} is not positive")
        return problems

    @tool("List the accounts of a customer (ids and types).",
          owner=Param("string", "Full name of the customer, e.g. 'Maria Lopez'."))
    def list_accounts(self, owner: str) -> dict:
        found = [{"account_id": k, "type": a["type"]}
                 for k, a in self.state["accounts"].items() if a["owner"].lower() == owner.lower()]
        if not found:
            raise ToolError(f"no accounts found for '{owner}'")
        return {"owner": owner, "accounts": found}

    @tool("Get the current balance of an account.", account_id=_ACC)
    def get_balance(self, account_id: str) -> dict:
        return {"account_id": account_id, "balance": self._account(account_id)["balance"]}

    @tool("Deposit money into an account.", account_id=_ACC, amount=_AMOUNT)
    def deposit(self, account_id: str, amount: float) -> dict:
        account = self._usable(account_id, amount)
        account["balance"] = money(account["balance"] + amount)
        self.state["transactions"].append({"to": account_id, "amount": money(amount)})
        return {"account_id": account_id, "balance": account["balance"]}

    @tool("Withdraw money from an account.", account_id=_ACC, amount=_AMOUNT)
    def withdraw(self, account_id: str, amount: float) -> dict:
        account = self._usable(account_id, amount)
        if amount > account["balance"] + 1e-9:
            raise ToolError(f"insufficient funds in '{account_id}'")
        account["balance"] = money(account["balance"] - amount)
        self.state["transactions"].append({"from": account_id, "amount": money(amount)})
        return {"account_id": account_id, "balance": account["balance"]}

    @tool("Transfer money between two accounts.",
          from_account=Param("string", "Account id to take the money from."),
          to_account=Param("string", "Account id to put the money into."), amount=_AMOUNT)
    def transfer(self, from_account: str, to_account: str, amount: float) -> dict:
        source = self._usable(from_account, amount)
        target = self._usable(to_account, amount)
        if from_account == to_account:
            raise ToolError("cannot transfer to the same account")
        if amount > source["balance"] + 1e-9:
            raise ToolError(f"insufficient funds in '{from_account}'")
        source["balance"] = money(source["balance"] - amount)
        target["balance"] = money(target["balance"] + amount)
        self.state["transactions"].append(
            {"from": from_account, "to": to_account, "amount": money(amount)})
        return {"from_balance": source["balance"], "to_balance": target["balance"]}

    @tool("Freeze an account so that no money can move in or out.", account_id=_ACC)
    def freeze_account(self, account_id: str) -> dict:
        self._account(account_id)["frozen"] = True
        return {"account_id": account_id, "frozen": True}

    @tool("List the recent transactions of an account.", account_id=_ACC)
    def get_transactions(self, account_id: str) -> dict:
        self._account(account_id)
        rows = [t for t in self.state["transactions"] if account_id in (t.get("from"), t.get("to"))]
        return {"account_id": account_id, "transactions": rows[-10:]}

    @staticmethod
    def generate(rng: random.Random, tier: int) -> TaskSpec:
        state, owners = _make_state(rng)
        maker = {1: _tier1, 2: _tier2, 3: _tier3, 4: _tier45, 5: _tier45}[tier]
        return maker(rng, state, owners, tier)


def _make_state(rng: random.Random) -> tuple[dict, dict[str, dict[str, str]]]:
    people = rng.sample(NAMES.people, 5)
    ids = rng.sample(range(1000, 9999), 10)
    accounts, owners = {}, {}
    for index, person in enumerate(people):
        kinds = ["checking", "savings"] if index < 3 or rng.random() < 0.5 else ["checking"]
        owners[person] = {}
        for kind in kinds:
            account_id = f"ACC-{ids.pop()}"
            balance = rng.randrange(200_00, 5000_00, 2) / 100
            accounts[account_id] = {"owner": person, "type": kind, "balance": balance,
                                    "frozen": False}
            owners[person][kind] = account_id
    return {"accounts": accounts, "transactions": []}, owners


def _balance_check(state: dict, account_id: str, balance: float) -> Check:
    return Check(f"balance_{account_id}", f"{account_id} has a balance of {balance:.2f}", "eq",
                 ("accounts", account_id, "balance"), money(balance))


def _single(rng, state, account_id, tier, who):
    """A deposit/withdrawal/freeze on one account (``who`` describes it in the goal)."""
    balance = state["accounts"][account_id]["balance"]
    action = rng.choice(["deposit", "withdraw", "freeze"])
    guard = guard_others("others_unchanged", "account", ("accounts",), [account_id])
    if action == "freeze":
        goal = pick(rng, ["Freeze {w}.", "Please freeze {w} right away.",
                          "I lost my card: freeze {w}."], w=who)
        check = Check("frozen", f"{account_id} is frozen", "eq",
                      ("accounts", account_id, "frozen"), True)
        return goal, [check, guard], [("freeze_account", {"account_id": account_id})]
    amount = float(rng.randrange(5, min(500, int(balance)), 5))
    if action == "deposit":
        goal = pick(rng, ["Deposit ${a:.2f} into {w}.", "Put ${a:.2f} in {w}.",
                          "Please add ${a:.2f} to {w}."], a=amount, w=who)
        new = balance + amount
    else:
        goal = pick(rng, ["Withdraw ${a:.2f} from {w}.", "Take ${a:.2f} out of {w}.",
                          "I need ${a:.2f} in cash from {w}."], a=amount, w=who)
        new = balance - amount
    calls = [(action, {"account_id": account_id, "amount": amount})]
    return goal, [_balance_check(state, account_id, new), guard], calls


def _tier1(rng, state, owners, tier):
    account_id = rng.choice(sorted(state["accounts"]))
    goal, checks, calls = _single(rng, state, account_id, tier, f"account {account_id}")
    return TaskSpec(goal, state, checks, calls, tier)


def _tier2(rng, state, owners, tier):
    person = rng.choice(sorted(owners))
    kind = rng.choice(sorted(owners[person]))
    account_id = owners[person][kind]
    goal, checks, calls = _single(rng, state, account_id, tier, f"{person}'s {kind} account")
    return TaskSpec(goal, state, checks, [("list_accounts", {"owner": person}), *calls], tier)


def _pair(rng, owners):
    savers = sorted(p for p in owners if "savings" in owners[p])
    receiver = rng.choice(savers)
    sender = rng.choice(sorted(p for p in owners if p != receiver))
    return sender, owners[sender]["checking"], receiver, owners[receiver]["savings"]


def _tier3(rng, state, owners, tier):
    sender, src, receiver, dst = _pair(rng, owners)
    amount = float(rng.randrange(10, int(state["accounts"][src]["balance"]), 5))
    goal = pick(rng, [
        "Transfer ${a:.2f} from {s}'s checking account to {r}'s savings account.",
        "Send ${a:.2f} from the checking account of {s} to the savings account of {r}.",
        "{s} wants to move ${a:.2f} from their checking account into {r}'s savings account.",
    ], a=amount, s=sender, r=receiver)
    checks = _transfer_checks(state, src, dst, amount)
    calls = [("list_accounts", {"owner": sender}), ("list_accounts", {"owner": receiver}),
             ("transfer", {"from_account": src, "to_account": dst, "amount": amount})]
    return TaskSpec(goal, state, checks, calls, tier)


def _transfer_checks(state, src, dst, amount):
    accounts = state["accounts"]
    return [_balance_check(state, src, accounts[src]["balance"] - amount),
            _balance_check(state, dst, accounts[dst]["balance"] + amount),
            guard_others("others_unchanged", "account", ("accounts",), [src, dst])]


def _tier45(rng, state, owners, tier):
    sender, src, receiver, dst = _pair(rng, owners)
    balance = state["accounts"][src]["balance"]
    if tier == 5:
        amount = balance
        goal = pick(rng, [
            ("{s} is closing their checking account: move its entire balance into {r}'s savings "
            "account, then freeze {s}'s checking account."),
            ("Empty {s}'s checking account into {r}'s savings account and freeze the checking "
            "account afterwards."),
        ], s=sender, r=receiver)
    elif rng.random() < 0.5:
        amount = money(balance / 2)
        goal = pick(rng, [
            "Transfer half of the balance of {s}'s checking account to {r}'s savings account.",
            "Move exactly half of what is in {s}'s checking account into {r}'s savings account.",
        ], s=sender, r=receiver)
    else:
        keep = float(rng.randrange(50, 150, 10))
        amount = money(balance - keep)
        goal = pick(rng, [
            ("Transfer everything except ${k:.2f} from {s}'s checking account to {r}'s savings "
            "account."),
            ("Leave only ${k:.2f} in {s}'s checking account and move the rest to {r}'s savings "
            "account."),
        ], k=keep, s=sender, r=receiver)
    checks = _transfer_checks(state, src, dst, amount)
    calls = [("list_accounts", {"owner": sender}), ("get_balance", {"account_id": src}),
             ("list_accounts", {"owner": receiver}),
             ("transfer", {"from_account": src, "to_account": dst, "amount": amount})]
    if tier == 5:
        checks.insert(2, Check("frozen", f"{src} is frozen", "eq",
                               ("accounts", src, "frozen"), True))
        calls.append(("freeze_account", {"account_id": src}))
    return TaskSpec(goal, state, checks, calls, tier)
