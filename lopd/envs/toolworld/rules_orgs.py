"""The organisations of the ToolWorld rules suites and their unstated rules.

Two training organisations per training domain (rules-train and rules-test), one or two
held-out organisations per domain (rules-transfer only; smarthome has only held-out ones), and
two more per training domain that only ``rules-icl`` uses: the suite that teaches a warm start
to act on experience in its context (``lopd sft --experience-suite``). The icl organisations
gate the same tools as the others with different prerequisites, so that no single rule can be
learnt from them; what they teach is to read the rule from same-organisation successes.
Each rule is a ``rules.Rule``: a prerequisite call or a naming convention (``rules`` module
docstring). ``RULES_TABLE`` in the docs is generated from ``Rule.text``.
"""

from __future__ import annotations

import posixpath

from lopd.envs.toolworld.rules import Org, Rule, file_result


def _arg(name: str, as_key: str | None = None):
    """``need_args`` that copies the gated call's argument ``name`` (as ``as_key``)."""
    return lambda world, args: {as_key or name: args[name]}


def _none(world, args):
    return {}


def _prerequisite(key, text, gated, failure, need, need_args=_none, when=None):
    fill = (("note", "reviewed per policy"),) if need == "add_note" else ()
    return Rule(key, text, tuple(gated), failure, when or (lambda w, a: True), need, need_args,
                fill=fill)


def _amount_at_least(limit):
    return lambda world, args: args["amount"] >= limit


def _creates_file(world, args):
    return file_result(world.state, args) not in world.state["files"]


def _ticket_name(world, args):
    """The created file's path with the request's ticket id in front of its name."""
    path = file_result(world.state, args)
    ticket = world.state["policy"]["ticket"]
    base = posixpath.basename(path)
    return path if base.startswith(ticket + "_") else posixpath.join(
        posixpath.dirname(path), f"{ticket}_{base}")


def _titled(prefix):
    return lambda world, args: args["title"] if args["title"].startswith(prefix) else \
        prefix + args["title"]


def _parent(world, args):
    return {"path": posixpath.dirname(posixpath.normpath(args["path"]))}


def _room_of(world, args):
    return {"room": world.state["devices"][args["device_id"]]["room"]}


def _booking_passenger(world, args):
    return {"passenger": world.state["bookings"][args["booking_id"]]["passenger"]}


_ID_CHECK = "identity not verified"
_APPROVAL = "no approval on record"

ORG_LIST = [
    # banking
    Org("northwind", "Northwind Bank", "banking", "Northwind Bank support desk:", (
        _prerequisite("nw-money-out", "withdrawals of $200 or more need verify_identity on "
                      "the account", ("withdraw",),
                      _ID_CHECK, "verify_identity", _arg("account_id"), _amount_at_least(200)),
        _prerequisite("nw-transfer-out", "transfers of $200 or more need verify_identity on the "
                      "source account", ("transfer",), _ID_CHECK,
                      "verify_identity", _arg("from_account", "account_id"),
                      _amount_at_least(200)),
        _prerequisite("nw-freeze", "freezing an account needs verify_identity on it first",
                      ("freeze_account",), _ID_CHECK, "verify_identity", _arg("account_id")),
    ), "train"),
    Org("harbor", "Harbor Credit Union", "banking", "Harbor Credit Union back office:", (
        _prerequisite("hb-deposit", "a deposit of $200 or more needs verify_identity on the "
                      "receiving account", ("deposit",), _ID_CHECK, "verify_identity",
                      _arg("account_id"), _amount_at_least(200)),
        _prerequisite("hb-transfer-in", "a transfer needs verify_identity on the receiving "
                      "account", ("transfer",), _ID_CHECK, "verify_identity",
                      _arg("to_account", "account_id")),
        _prerequisite("hb-freeze", "freezing an account needs a note on it first (add_note)",
                      ("freeze_account",), "no note on the account", "add_note",
                      _arg("account_id")),
    ), "train"),
    Org("summit", "Summit Savings", "banking", "Summit Savings operations:", (
        _prerequisite("sm-look", "deposits, withdrawals and freezes need get_balance on the "
                      "account first", ("deposit", "withdraw", "freeze_account"),
                      "balance not reviewed", "get_balance", _arg("account_id")),
        _prerequisite("sm-transfer", "a transfer needs a note on the source account "
                      "(add_note)", ("transfer",), "no note on the account", "add_note",
                      _arg("from_account", "account_id")),
    ), "transfer"),
    # inventory
    Org("acme", "Acme Warehousing", "inventory", "Acme Warehousing floor team:", (
        _prerequisite("ac-price", "price changes need request_approval for the item",
                      ("set_price",), _APPROVAL, "request_approval", _arg("sku")),
        _prerequisite("ac-move", "moving an item into an aisle of rows D or E needs audit_item "
                      "first", ("move_item",), "item not audited", "audit_item", _arg("sku"),
                      when=lambda w, a: a["location"][:1] in ("D", "E")),
    ), "train"),
    Org("globex", "Globex Logistics", "inventory", "Globex Logistics stock desk:", (
        _prerequisite("gx-stock", "stock changes of 20 units or more need audit_item first",
                      ("adjust_stock",), "item not audited", "audit_item", _arg("sku"),
                      when=lambda w, a: abs(a["delta"]) >= 20),
        _prerequisite("gx-move", "moving an item needs request_approval", ("move_item",),
                      _APPROVAL, "request_approval", _arg("sku")),
    ), "train"),
    Org("initech", "Initech Stores", "inventory", "Initech Stores back room:", (
        _prerequisite("it-stock", "stock changes need request_approval", ("adjust_stock",),
                      _APPROVAL, "request_approval", _arg("sku")),
        _prerequisite("it-price", "price changes need audit_item first", ("set_price",),
                      "item not audited", "audit_item", _arg("sku")),
    ), "transfer"),
    # calendar
    Org("fabrikam", "Fabrikam Events", "calendar", "Fabrikam events office:", (
        _prerequisite("fb-cancel", "cancelling an event needs notify_attendees first",
                      ("cancel_event",), "attendees not notified", "notify_attendees",
                      _arg("event_id")),
        Rule("fb-title", "new events are titled 'FB-' + the title", ("create_event",),
             "title breaks the naming policy", rename=("title", _titled("FB-"))),
    ), "train"),
    Org("contoso", "Contoso Scheduling", "calendar", "Contoso scheduling desk:", (
        _prerequisite("ct-hold", "creating or moving an event needs hold_slot on its new date "
                      "and start", ("create_event", "move_event"), "slot not held", "hold_slot",
                      lambda w, a: {"date": a["date"], "start": a["start"]}),
        _prerequisite("ct-invite", "adding an attendee needs notify_attendees first",
                      ("add_attendee",), "attendees not notified", "notify_attendees",
                      _arg("event_id")),
    ), "train"),
    Org("tailspin", "Tailspin Conferences", "calendar", "Tailspin Conferences planning:", (
        _prerequisite("ts-move", "moving an event needs notify_attendees first",
                      ("move_event",), "attendees not notified", "notify_attendees",
                      _arg("event_id")),
        _prerequisite("ts-create", "creating an event needs hold_slot on its date and start",
                      ("create_event",), "slot not held", "hold_slot",
                      lambda w, a: {"date": a["date"], "start": a["start"]}),
    ), "transfer"),
    # filesystem
    Org("lumen", "Lumen Studios", "filesystem", "Lumen Studios IT, ticket {ticket}:", (
        Rule("lm-ticket", "a new file's name starts with the ticket id and '_'",
             ("write_file",), "file name breaks the naming policy", when=_creates_file,
             rename=("path", _ticket_name)),
        Rule("lm-ticket-move", "a moved file's new name starts with the ticket id and '_'", ("move_file",),
             "file name breaks the naming policy", when=_creates_file,
             rename=("destination", _ticket_name)),
        _prerequisite("lm-mkdir", "creating a directory needs list_dir on its parent first",
                      ("make_dir",), "parent directory not reviewed", "list_dir", _parent),
    ), "train"),
    Org("quarry", "Quarry Legal", "filesystem", "Quarry Legal records, ticket {ticket}:", (
        _prerequisite("qr-delete", "deleting a file needs backup_file of it first", ("delete_file",), "no backup on record",
                      "backup_file", _arg("path")),
        _prerequisite("qr-overwrite", "writing over an existing file needs backup_file of "
                      "it first", ("write_file",),
                      "no backup on record", "backup_file", _arg("path"),
                      when=lambda w, a: not _creates_file(w, a)),
        _prerequisite("qr-move", "moving a file out of /projects needs backup_file of it first",
                      ("move_file",), "no backup on record", "backup_file",
                      _arg("source", "path"), when=lambda w, a: a["source"].startswith("/projects/")),
    ), "train"),
    Org("vertex", "Vertex Data", "filesystem", "Vertex Data operations, ticket {ticket}:", (
        _prerequisite("vx-delete", "deleting a file needs backup_file of it first",
                      ("delete_file",), "no backup on record", "backup_file", _arg("path")),
        _prerequisite("vx-mkdir", "creating a directory needs list_dir on its parent first",
                      ("make_dir",), "parent directory not reviewed", "list_dir", _parent),
    ), "transfer"),
    # shopping
    Org("bluebird", "Bluebird Market", "shopping", "Bluebird Market customer care:", (
        _prerequisite("bb-pricing", "checkout and coupons need apply_member_pricing first",
                      ("checkout", "apply_coupon"), "member pricing not applied",
                      "apply_member_pricing"),
        _prerequisite("bb-remove", "removing a product needs view_cart first",
                      ("remove_from_cart",), "cart not reviewed", "view_cart"),
    ), "train"),
    Org("cobalt", "Cobalt Outfitters", "shopping", "Cobalt Outfitters web desk:", (
        _prerequisite("cb-address", "checkout and coupons need verify_address first",
                      ("checkout", "apply_coupon"), "address not verified", "verify_address"),
        _prerequisite("cb-add", "adding a product needs get_product on it first",
                      ("add_to_cart",), "product not reviewed", "get_product",
                      _arg("product_id")),
    ), "train"),
    Org("dune", "Dune Supply", "shopping", "Dune Supply orders:", (
        _prerequisite("dn-address", "checkout needs verify_address first", ("checkout",),
                      "address not verified", "verify_address"),
        _prerequisite("dn-add", "adding 2 or more of a product needs apply_member_pricing",
                      ("add_to_cart",), "member pricing not applied", "apply_member_pricing",
                      when=lambda w, a: a["quantity"] >= 2),
    ), "transfer"),
    # travel
    Org("aurora", "Aurora Air", "travel", "Aurora Air reservations:", (
        _prerequisite("au-docs", "booking needs check_passport of the passenger first",
                      ("book_flight",), "travel documents not checked", "check_passport",
                      _arg("passenger")),
    ), "train"),
    Org("borealis", "Borealis Travel", "travel", "Borealis Travel agency:", (
        _prerequisite("br-fare", "booking a fare of $150 or more needs hold_fare on the flight "
                      "first", ("book_flight",), "fare not held", "hold_fare", _arg("flight_id"),
                      when=lambda w, a: w.state["flights"][a["flight_id"]]["price"] >= 150),
        _prerequisite("br-cancel", "cancelling needs list_bookings of the passenger first",
                      ("cancel_booking",), "bookings not reviewed", "list_bookings",
                      _booking_passenger),
    ), "train"),
    Org("cirrus", "Cirrus Jet", "travel", "Cirrus Jet bookings:", (
        _prerequisite("cr-fare", "booking needs get_flight on the flight first",
                      ("book_flight",), "flight not reviewed", "get_flight", _arg("flight_id")),
        _prerequisite("cr-cancel", "cancelling needs check_passport of the passenger first",
                      ("cancel_booking",), "travel documents not checked", "check_passport",
                      _booking_passenger),
    ), "transfer"),
    # smarthome (held out: transfer only)
    Org("nesthaven", "Nest Haven", "smarthome", "Nest Haven residences:", (
        _prerequisite("nh-lock", "locks need confirm_occupant of their room first",
                      ("set_lock",), "residents not consulted", "confirm_occupant", _room_of),
        _prerequisite("nh-heat", "thermostat changes need get_device first",
                      ("set_thermostat",), "device not reviewed", "get_device",
                      _arg("device_id")),
    ), "transfer"),
    Org("oakridge", "Oakridge Apartments", "smarthome", "Oakridge Apartments concierge:", (
        _prerequisite("ok-lights", "switching or dimming a light needs confirm_occupant of its "
                      "room first", ("turn_on", "turn_off", "set_brightness"),
                      "residents not consulted", "confirm_occupant", _room_of),
    ), "transfer"),
]
# --- rules-icl: organisations only the experience-reading warm start trains on ------------
ICL_ORGS = [
    Org("pinecrest", "Pinecrest Bank", "banking", "Pinecrest Bank teller line:", (
        _prerequisite("pc-withdraw", "withdrawals need get_balance on the account first",
                      ("withdraw",), "balance not reviewed", "get_balance", _arg("account_id")),
        _prerequisite("pc-deposit", "deposits of $200 or more need a note on the account "
                      "(add_note)", ("deposit",), "no note on the account", "add_note",
                      _arg("account_id"), _amount_at_least(200)),
    ), "icl"),
    Org("redwood", "Redwood Credit", "banking", "Redwood Credit service team:", (
        _prerequisite("rw-transfer", "transfers need verify_identity on the source account",
                      ("transfer",), _ID_CHECK, "verify_identity",
                      _arg("from_account", "account_id")),
        _prerequisite("rw-freeze", "freezing an account needs get_balance on it first",
                      ("freeze_account",), "balance not reviewed", "get_balance",
                      _arg("account_id")),
        _prerequisite("rw-withdraw", "withdrawals of $200 or more need a note on the account "
                      "(add_note)", ("withdraw",), "no note on the account", "add_note",
                      _arg("account_id"), _amount_at_least(200)),
    ), "icl"),
    Org("keystone", "Keystone Depot", "inventory", "Keystone Depot stock room:", (
        _prerequisite("ks-move", "moving an item needs audit_item first", ("move_item",),
                      "item not audited", "audit_item", _arg("sku")),
        _prerequisite("ks-stock", "stock changes of 10 units or more need request_approval",
                      ("adjust_stock",), _APPROVAL, "request_approval", _arg("sku"),
                      when=lambda w, a: abs(a["delta"]) >= 10),
    ), "icl"),
    Org("orion", "Orion Supply", "inventory", "Orion Supply warehouse desk:", (
        _prerequisite("or-stock", "stock changes need audit_item first", ("adjust_stock",),
                      "item not audited", "audit_item", _arg("sku")),
        _prerequisite("or-price", "price changes need get_item on the item first",
                      ("set_price",), "item not reviewed", "get_item", _arg("sku")),
    ), "icl"),
    Org("lakeside", "Lakeside Venues", "calendar", "Lakeside Venues bookings office:", (
        Rule("lk-title", "new events are titled 'LK-' + the title", ("create_event",),
             "title breaks the naming policy", rename=("title", _titled("LK-"))),
        _prerequisite("lk-move", "moving an event needs hold_slot on its new date and start",
                      ("move_event",), "slot not held", "hold_slot",
                      lambda w, a: {"date": a["date"], "start": a["start"]}),
    ), "icl"),
    Org("ridgeline", "Ridgeline Meetings", "calendar", "Ridgeline Meetings coordinators:", (
        _prerequisite("rg-move", "moving an event needs notify_attendees first",
                      ("move_event",), "attendees not notified", "notify_attendees",
                      _arg("event_id")),
        _prerequisite("rg-cancel", "cancelling an event needs list_events on its date first",
                      ("cancel_event",), "day not reviewed", "list_events",
                      lambda w, a: {"date": w.state["events"][a["event_id"]]["date"]}),
    ), "icl"),
    Org("harvest", "Harvest Media", "filesystem", "Harvest Media IT, ticket {ticket}:", (
        Rule("hv-ticket", "a new file's name starts with the ticket id and '_'",
             ("write_file",), "file name breaks the naming policy", when=_creates_file,
             rename=("path", _ticket_name)),
        _prerequisite("hv-delete", "deleting a file needs list_dir on its parent first",
                      ("delete_file",), "parent directory not reviewed", "list_dir", _parent),
    ), "icl"),
    Org("granite", "Granite Partners", "filesystem", "Granite Partners records, ticket {ticket}:", (
        _prerequisite("gr-move", "moving a file needs backup_file of it first", ("move_file",),
                      "no backup on record", "backup_file", _arg("source", "path")),
        _prerequisite("gr-mkdir", "creating a directory needs list_dir on its parent first",
                      ("make_dir",), "parent directory not reviewed", "list_dir", _parent),
    ), "icl"),
    Org("maple", "Maple Grocers", "shopping", "Maple Grocers help desk:", (
        _prerequisite("mp-checkout", "checkout needs view_cart first", ("checkout",),
                      "cart not reviewed", "view_cart"),
        _prerequisite("mp-coupon", "coupons need verify_address first", ("apply_coupon",),
                      "address not verified", "verify_address"),
    ), "icl"),
    Org("sterling", "Sterling Goods", "shopping", "Sterling Goods order line:", (
        _prerequisite("st-add", "adding a product needs apply_member_pricing first",
                      ("add_to_cart",), "member pricing not applied", "apply_member_pricing"),
        _prerequisite("st-remove", "removing a product needs get_product on it first",
                      ("remove_from_cart",), "product not reviewed", "get_product",
                      _arg("product_id")),
    ), "icl"),
    Org("zephyr", "Zephyr Airways", "travel", "Zephyr Airways ticket desk:", (
        _prerequisite("zp-book", "booking needs hold_fare on the flight first",
                      ("book_flight",), "fare not held", "hold_fare", _arg("flight_id")),
        _prerequisite("zp-cancel", "cancelling needs check_passport of the passenger first",
                      ("cancel_booking",), "travel documents not checked", "check_passport",
                      _booking_passenger),
    ), "icl"),
    Org("polaris", "Polaris Tours", "travel", "Polaris Tours travel desk:", (
        _prerequisite("pl-book", "booking needs list_bookings of the passenger first",
                      ("book_flight",), "bookings not reviewed", "list_bookings",
                      _arg("passenger")),
        _prerequisite("pl-cancel", "cancelling needs get_flight on the booked flight first",
                      ("cancel_booking",), "flight not reviewed", "get_flight",
                      lambda w, a: {"flight_id": w.state["bookings"][a["booking_id"]]["flight_id"]}),
    ), "icl"),
]
ORGS = {org.key: org for org in [*ORG_LIST, *ICL_ORGS]}
