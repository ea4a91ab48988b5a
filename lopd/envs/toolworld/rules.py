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
rules use; the organisations and their rules are in ``rules_orgs``.

Suites: ``rules-train`` (400 per training domain) and ``rules-test`` (200) draw on the same
training organisations (two per training domain), ``rules-transfer`` (120) holds only
organisations that no training or test task uses, in all seven domains (smarthome included).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from lopd.chat import format_tool_call, validate_arguments
from lopd.envs.toolworld.base import Check, Domain, TaskSpec
from lopd.types import Task

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
    from lopd.envs.toolworld.rules_orgs import ORGS

    policy = state.get("policy") if isinstance(state, dict) else None
    return ORGS.get(policy.get("org")) if isinstance(policy, dict) else None


def _substitute(node: Any, renames: dict[str, str]) -> Any:
    """``node`` with every string equal to a key of ``renames`` replaced (recursively)."""
    if isinstance(node, str):
        return renames.get(node, node)
    if isinstance(node, tuple):
        return tuple(_substitute(v, renames) for v in node)
    if isinstance(node, list):
        return [_substitute(v, renames) for v in node]
    if isinstance(node, dict):
        return {_substitute(k, renames): _substitute(v, renames) for k, v in node.items()}
    return node


def _renamed_check(check: Check, renames: dict[str, str]) -> Check:
    if not renames:
        return check
    description = check.description
    for old, new in renames.items():
        description = description.replace(old, new)
    return replace(check, description=description, path=_substitute(check.path, renames),
                   value=_substitute(check.value, renames))


def _apply_rules(world: Domain, org: Org, name: str, args: Args,
                 renames: dict[str, str], fired: list[str]) -> list[tuple[str, Args]]:
    """The calls that carry out ``name(args)`` under ``org``'s rules (prerequisites first, the
    call with its renamed arguments last); ``renames`` and ``fired`` are updated."""
    calls: list[tuple[str, Args]] = []
    for rule in org.rules:
        if rule.rename is None or not rule.applies(world, name, args):
            continue
        argument, expected = rule.rename
        new = expected(world, args)
        if args[argument] != new:
            renames[args[argument]] = new
            args = {**args, argument: new}
        fired.append(rule.key)
    for rule in org.rules:
        if rule.need is None or not rule.applies(world, name, args):
            continue
        fired.append(rule.key)
        if not rule.satisfied(world, args):
            wanted = rule.need_args(world, args) if rule.need_args else {}
            pre = (rule.need, {**wanted, **dict(rule.fill)})
            calls.append(pre)
            _must(world, *pre)
    _must(world, name, args)
    return [*calls, (name, args)]


def _must(world: Domain, name: str, args: Args) -> None:
    result = world.call(name, args)
    if isinstance(result, dict) and "error" in result:
        raise RuntimeError(f"rules reference call {name}({args}) failed: {result['error']}")


def rules_spec(domain: str, org_key: str, tier: int, seed: int) -> tuple[TaskSpec, list[str]]:
    """The rules task of (domain, organisation, tier, seed) and the keys of the rules its
    reference solution meets (module docstring)."""
    from lopd.envs.toolworld.rules_domains import RULES_DOMAINS
    from lopd.envs.toolworld.rules_orgs import ORGS
    from lopd.envs.toolworld.tasks import generate_spec

    org = ORGS[org_key]
    plain = generate_spec(domain, tier, seed)
    state = copy.deepcopy(plain.state)
    state["policy"] = {"org": org.key, "ticket": ticket_id(org, seed)}
    world = RULES_DOMAINS[domain](state)
    reference: list[tuple[str, Args]] = []
    renames: dict[str, str] = {}
    fired: list[str] = []
    for name, args in plain.reference:
        reference += _apply_rules(world, org, name, _substitute(args, renames), renames, fired)
    checks = [_renamed_check(c, renames) for c in plain.checks]
    goal = org.intro.format(ticket=state["policy"]["ticket"]) + " " + plain.goal
    return TaskSpec(goal, state, checks, reference, tier), sorted(set(fired))


def ticket_id(org: Org, seed: int) -> str:
    """The request's ticket id (``{ticket}`` in an organisation's intro)."""
    letters = "".join(w[0] for w in org.name.split()[:2]).upper()
    return f"{letters}-{random.Random(seed).randrange(1000, 9999)}"


# --- suites ------------------------------------------------------------------------------

RULES_SPLIT_SIZES = {"train": 400 * 6, "test": 200, "transfer": 120}


def _split_orgs(split: str) -> dict[str, list[str]]:
    """domain -> organisation keys of ``split`` (train and test share the training orgs)."""
    from lopd.envs.toolworld.rules_orgs import ORGS

    kind = "transfer" if split == "transfer" else "train"
    found: dict[str, list[str]] = {}
    for org in ORGS.values():
        if org.split == kind:
            found.setdefault(org.domain, []).append(org.key)
    return found


def make_rules_task(split: str, domain: str, org_key: str, index: int, tier: int,
                    seed: int) -> Task:
    from lopd.envs.toolworld.rules_domains import RULES_DOMAINS

    spec, fired = rules_spec(domain, org_key, tier, seed)
    reference = "\n".join(format_tool_call(name, args) for name, args in spec.reference)
    return Task(
        id=f"tw-rules-{split}-{domain}-{index}", split=f"rules-{split}", domain=domain,
        prompt=spec.goal, tools=RULES_DOMAINS[domain].schemas(), reference=reference,
        metadata={"env": "toolworld", "domain": domain, "tier": tier, "seed": seed,
                  "org": org_key, "rules": fired,
                  "checks": [c.description for c in spec.checks],
                  "reference_calls": len(spec.reference)},
    )


@lru_cache(maxsize=16)
def generate_rules_split(split: str, mix_items: tuple[tuple[int, float], ...]) -> tuple[Task, ...]:
    """Every task of ``rules-{split}``, interleaved over domains (as the plain splits)."""
    from lopd.envs.toolworld.tasks import _per_domain, task_seed, tier_schedule

    if split not in RULES_SPLIT_SIZES:
        raise ValueError(f"unknown ToolWorld rules split {split!r} (train, test, transfer)")
    orgs = _split_orgs(split)
    domains = list(orgs)
    counts = _per_domain(RULES_SPLIT_SIZES[split], domains)
    banned = ({t.prompt for t in generate_rules_split("train", mix_items)}
              if split == "test" else set())
    per_domain: dict[str, list[Task]] = {}
    for domain in domains:
        rng = random.Random(task_seed(f"rules-{split}", domain, -1))
        tasks = []
        for index, tier in enumerate(tier_schedule(counts[domain], dict(mix_items), rng)):
            org_key = orgs[domain][index % len(orgs[domain])]
            attempt = 0
            while True:
                key = index if attempt == 0 else -2 - index - attempt
                seed = task_seed(f"rules-{split}", domain, key)
                task = make_rules_task(split, domain, org_key, index, tier, seed)
                if task.prompt not in banned:
                    break
                attempt += 1
            tasks.append(task)
        per_domain[domain] = tasks
    return tuple(per_domain[d][i] for i in range(max(counts.values())) for d in domains
                 if i < len(per_domain[d]))
