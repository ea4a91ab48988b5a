"""ToolWorld business rules: organisations whose policies the prompt never states.

Each rules task belongs to one organisation, named at the start of its prompt ("Northwind Bank
support desk: ..."). An organisation works in one domain and has a few deterministic rules
(``Rule``) that neither the prompt nor the tool descriptions mention:

- a *prerequisite*: before a gated call (``transfer`` of $100 or more, ``checkout``, ...) some
  other call must already have succeeded in the episode (``verify_identity`` of the source
  account, ``apply_member_pricing``, ...);
- a *naming* rule: an argument of a gated call must follow a convention (a new file's name
  starts with the ticket id of the request; a new event's title carries a team prefix).

A gated call that breaks a rule is rejected before it runs, with an error that names what
failed but not how to fix it ("transfer rejected by Northwind Bank policy: identity not
verified"), so the goal checks fail unless the agent satisfies the rule. The rules live only in
the environment and in successful trajectories: a reference solution shows them plainly (the
prerequisite call right before the gated one, the renamed file).

A rules task is the plain task of the same (domain, tier, seed) with the organisation's rules
applied: its reference is replayed through the rules world, prerequisite calls are inserted
where a rule gates a call, renamed arguments are substituted in the later calls and in the
checks. The rules domains (``rules_domains``) are the plain domains plus a few neutral tools the
rules use; the organisations and their rules are in ``rules_orgs``. Layers, each importing
only those before it: this module (``Rule``, ``Org``), ``rules_orgs``, ``rules_domains`` (the
rules worlds and ``RulesMixin``), ``rules_tasks`` (specs and splits), then ``suites``.

Suites: ``rules-train`` (400 per training domain) and ``rules-test`` (200) draw on the same
training organisations (two per training domain), ``rules-transfer`` (120) holds only
organisations that no training or test task uses, in all seven domains (smarthome included).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lopd.envs.toolworld.base import Domain

Args = dict[str, Any]


def always(world: Domain, args: Args) -> bool:
    return True


@dataclass(frozen=True)
class Rule:
    """One policy of an organisation (see the module docstring).

    ``gated``: the tools it applies to; ``when(world, args)``: whether it applies to this call.
    Prerequisite: ``need`` is the tool that must have succeeded earlier with the arguments
    ``need_args(world, args)`` (string values compared without case; a reference solution adds
    ``fill``, arguments any value of which will do). Naming: ``rename`` is
    ``(argument, expected(world, args))``, the value the argument must have.
    ``failure`` is what the rejection names; ``text`` states the rule (never shown to the agent).
    """

    key: str
    text: str
    gated: tuple[str, ...]
    failure: str
    when: Callable[[Domain, Args], bool] = always
    need: str | None = None
    need_args: Callable[[Domain, Args], Args] | None = None
    rename: tuple[str, Callable[[Domain, Args], str]] | None = None
    fill: tuple[tuple[str, Any], ...] = ()  # further arguments of the reference's prerequisite

    def applies(self, world: Domain, name: str, args: Args) -> bool:
        return name in self.gated and bool(self.when(world, args))

    def satisfied(self, world: Domain, args: Args) -> bool:
        if self.rename is not None:
            argument, expected = self.rename
            return args.get(argument) == expected(world, args)
        wanted = self.need_args(world, args) if self.need_args else {}
        return any(name == self.need and all(_same(done.get(k), v) for k, v in wanted.items())
                   for name, done in getattr(world, "history", []))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().lower() == b.strip().lower()
    return a == b


@dataclass(frozen=True)
class Org:
    """An organisation: its domain, the prompt's opening words, its rules and its split."""

    key: str
    name: str
    domain: str
    intro: str
    rules: tuple[Rule, ...]
    split: str  # "train" (rules-train and rules-test) or "transfer"


def file_result(state: dict, args: dict) -> str:
    """The path a ``write_file`` / ``move_file`` call creates."""
    if "source" in args:
        destination = posixpath.normpath(args["destination"])
        if destination in state["dirs"]:
            return posixpath.join(destination, posixpath.basename(args["source"]))
        return destination
    return posixpath.normpath(args["path"])
