"""The ToolWorld domains of the rules suites: each plain domain plus a few neutral tools.

The added tools (``verify_identity``, ``request_approval``, ``hold_slot``, ``backup_file``,
``apply_member_pricing``, ``check_passport``, ``confirm_occupant``, ...) change no state and
their descriptions say what they do, never when a policy needs them: which organisation's rule
asks for which of them is what an agent learns from experience (``rules``, ``rules_orgs``).
Every rules domain enforces its organisation's rules through ``RulesMixin``.
"""

from __future__ import annotations

from typing import Any

from lopd.chat import validate_arguments
from lopd.envs.toolworld.banking import Banking
from lopd.envs.toolworld.base import Domain, Param, ToolError, tool
from lopd.envs.toolworld.calendar import Calendar, minutes, valid_date
from lopd.envs.toolworld.filesystem import FileSystem
from lopd.envs.toolworld.inventory import Inventory
from lopd.envs.toolworld.rules import Args, Org, Rule
from lopd.envs.toolworld.rules_orgs import ORGS
from lopd.envs.toolworld.shopping import Shopping
from lopd.envs.toolworld.smarthome import SmartHome
from lopd.envs.toolworld.travel import Travel

_NOTE = Param("string", "Text of the note.", max_length=500)


class RulesMixin:
    """Enforces the organisation's rules (``state["policy"]["org"]``) before each call and keeps
    the episode's successful calls (``history``) that prerequisites look for."""

    def __init__(self, state: dict[str, Any]):
        super().__init__(state)
        self.history: list[tuple[str, Args]] = []

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        problem = self.policy_problem(name, arguments)
        if problem:
            return {"error": problem}
        result = super().call(name, arguments)
        if not (isinstance(result, dict) and "error" in result):
            self.history.append((name, dict(arguments)))
        return result

    def policy_problem(self, name: Any, arguments: Any) -> str | None:
        """The rejection of a call that breaks a rule; None when it breaks none (or when the
        call is malformed: the tool's own validation answers that)."""
        schema = self._schemas_by_name().get(name) if isinstance(name, str) else None
        if schema is None or validate_arguments(arguments, schema):
            return None
        org = org_of(self.state)
        if org is None:
            return None
        for rule in org.rules:
            if _breaks(rule, self, name, arguments):
                return f"{name} rejected by {org.name} policy: {rule.failure}"
        return None


def _breaks(rule: Rule, world: Domain, name: str, arguments: Args) -> bool:
    """Whether the call breaks ``rule``; False when the rule cannot read the call (an unknown
    id, say): the tool itself answers that."""
    try:
        return rule.applies(world, name, arguments) and not rule.satisfied(world, arguments)
    except Exception:  # noqa: BLE001 - model input must never crash an episode
        return False


def org_of(state: dict[str, Any]) -> Org | None:
    policy = state.get("policy") if isinstance(state, dict) else None
    return ORGS.get(policy.get("org")) if isinstance(policy, dict) else None


class RulesBanking(RulesMixin, Banking):
    @tool("Run the identity check on the owner of an account.",
          account_id=Param("string", "Account id, e.g. 'ACC-1234'."))
    def verify_identity(self, account_id: str) -> dict:
        return {"account_id": account_id, "owner": self._account(account_id)["owner"],
                "verified": True}

    @tool("Attach an internal note to an account.",
          account_id=Param("string", "Account id, e.g. 'ACC-1234'."), note=_NOTE)
    def add_note(self, account_id: str, note: str) -> dict:
        self._account(account_id)
        return {"account_id": account_id, "noted": True}


class RulesInventory(RulesMixin, Inventory):
    @tool("Ask a supervisor to approve a change to an item.",
          sku=Param("string", "Item SKU, e.g. 'SKU-1042'."))
    def request_approval(self, sku: str) -> dict:
        self._item(sku)
        return {"sku": sku, "approved": True}

    @tool("Record a stock audit of an item.", sku=Param("string", "Item SKU, e.g. 'SKU-1042'."))
    def audit_item(self, sku: str) -> dict:
        return {"sku": sku, "audited_quantity": self._item(sku)["quantity"]}


class RulesCalendar(RulesMixin, Calendar):
    @tool("Place a tentative hold on a time slot.", date=Param("string", "Date as YYYY-MM-DD."),
          start=Param("string", "Start time HH:MM."))
    def hold_slot(self, date: str, start: str) -> dict:
        valid_date(date)
        minutes(start)
        return {"date": date, "start": start, "held": True}

    @tool("Send a message to everyone attending an event.",
          event_id=Param("string", "Event id, e.g. 'EV-101'."))
    def notify_attendees(self, event_id: str) -> dict:
        return {"event_id": event_id, "notified": list(self._event(event_id)["attendees"])}


class RulesFileSystem(RulesMixin, FileSystem):
    @tool("Save a copy of a path's current content to the backup store.",
          path=Param("string", "Absolute path, e.g. '/home/ana/notes.txt'."))
    def backup_file(self, path: str) -> dict:
        path = self._norm(path)
        return {"path": path, "backed_up": path in self.state["files"]}


class RulesShopping(RulesMixin, Shopping):
    @tool("Apply the customer's membership prices to the cart.")
    def apply_member_pricing(self) -> dict:
        return {"member_pricing": True, "subtotal": self._subtotal()}

    @tool("Confirm the customer's shipping address on file.")
    def verify_address(self) -> dict:
        return {"address_verified": True}


class RulesTravel(RulesMixin, Travel):
    @tool("Check a passenger's travel documents.", passenger=Param("string", "Full name of the passenger."))
    def check_passport(self, passenger: str) -> dict:
        return {"passenger": passenger, "documents": "valid"}

    @tool("Hold a flight's current fare for a short time.",
          flight_id=Param("string", "Flight id, e.g. 'FL-204'."))
    def hold_fare(self, flight_id: str) -> dict:
        return {"flight_id": flight_id, "fare": self._flight(flight_id)["price"], "held": True}


class RulesSmartHome(RulesMixin, SmartHome):
    @tool("Confirm with the residents of a room that a change may be made.",
          room=Param("string", "Room name, e.g. 'kitchen'."))
    def confirm_occupant(self, room: str) -> dict:
        if not any(d["room"] == room.lower() for d in self.state["devices"].values()):
            raise ToolError(f"no devices in '{room}'")
        return {"room": room, "confirmed": True}


RULES_DOMAINS: dict[str, type[Domain]] = {
    cls.name: cls for cls in (RulesBanking, RulesInventory, RulesCalendar, RulesFileSystem,
                              RulesShopping, RulesTravel, RulesSmartHome)
}
