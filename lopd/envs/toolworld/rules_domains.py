"""The ToolWorld domains of the rules suites: each plain domain plus a few neutral tools.

The added tools (``verify_identity``, ``request_approval``, ``hold_slot``, ``backup_file``,
``apply_member_pricing``, ``check_passport``, ``confirm_occupant``, ...) change no state and
their descriptions say what they do, never when a policy needs them: which organisation's rule
asks for which of them is what an agent learns from experience (``rules``, ``rules_orgs``).
Every rules domain enforces its organisation's rules through ``rules.RulesMixin``.
"""

from __future__ import annotations

import posixpath

from lopd.envs.toolworld.banking import Banking
from lopd.envs.toolworld.base import Domain, Param, ToolError, tool
from lopd.envs.toolworld.calendar import Calendar, minutes, valid_date
from lopd.envs.toolworld.filesystem import FileSystem
from lopd.envs.toolworld.inventory import Inventory
from lopd.envs.toolworld.rules import RulesMixin
from lopd.envs.toolworld.shopping import Shopping
from lopd.envs.toolworld.smarthome import SmartHome
from lopd.envs.toolworld.travel import Travel

_NOTE = Param("string", "Text of the note.", max_length=500)


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


def file_result(state: dict, args: dict) -> str:
    """The path a ``write_file`` / ``move_file`` call creates."""
    if "source" in args:
        destination = posixpath.normpath(args["destination"])
        if destination in state["dirs"]:
            return posixpath.join(destination, posixpath.basename(args["source"]))
        return destination
    return posixpath.normpath(args["path"])
