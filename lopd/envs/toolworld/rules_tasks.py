"""ToolWorld rules tasks: the plain task of (domain, tier, seed) replayed under an
organisation's rules (prerequisites inserted, renamed arguments carried into later calls and
the checks), and the ``rules-train`` / ``rules-test`` / ``rules-transfer`` splits built from
them with the plain splits' discipline (see ``rules`` for the rules themselves).
"""

from __future__ import annotations

import copy
import random
from dataclasses import replace
from functools import lru_cache
from typing import Any

from lopd.chat import format_tool_call
from lopd.envs.toolworld.base import Check, Domain, TaskSpec
from lopd.envs.toolworld.rules import Args, Org
from lopd.envs.toolworld.rules_domains import RULES_DOMAINS
from lopd.envs.toolworld.rules_orgs import ORGS
from lopd.envs.toolworld.tasks import _per_domain, generate_spec, task_seed, tier_schedule
from lopd.types import Task


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

RULES_SPLIT_SIZES = {"train": 400 * 6, "test": 200, "transfer": 120, "icl": 200 * 6}


def _split_orgs(split: str) -> dict[str, list[str]]:
    """domain -> organisation keys of ``split`` (train and test share the training orgs)."""
    kind = split if split in ("transfer", "icl") else "train"
    found: dict[str, list[str]] = {}
    for org in ORGS.values():
        if org.split == kind:
            found.setdefault(org.domain, []).append(org.key)
    return found


def make_rules_task(split: str, domain: str, org_key: str, index: int, tier: int,
                    seed: int) -> Task:
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
    if split not in RULES_SPLIT_SIZES:
        raise ValueError(f"unknown ToolWorld rules split {split!r} (train, test, transfer, icl)")
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
