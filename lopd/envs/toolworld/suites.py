"""ToolWorld suites: the plain splits (``tasks``) and the business-rules splits
(``rules_tasks``) behind one ``load_tasks``, and the spec and domain class of any ToolWorld
task, plain or rules, for the environment (``env``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from lopd.envs.toolworld.base import Domain, TaskSpec
from lopd.envs.toolworld.rules_domains import RULES_DOMAINS
from lopd.envs.toolworld.rules_tasks import generate_rules_split, rules_spec
from lopd.envs.toolworld.tasks import DEFAULT_MIX, DOMAINS, _generate_split, generate_spec
from lopd.types import Task


def spec_for(task: Task) -> TaskSpec:
    meta = task.metadata
    if "org" in meta:  # a rules task (lopd.envs.toolworld.rules)
        return rules_spec(meta["domain"], meta["org"], int(meta["tier"]), int(meta["seed"]))[0]
    return generate_spec(meta["domain"], int(meta["tier"]), int(meta["seed"]))


def domain_class(task: Task) -> type[Domain]:
    """The domain of ``task``: its rules domain when it belongs to an organisation."""
    if "org" in task.metadata:
        return RULES_DOMAINS[task.metadata["domain"]]
    return DOMAINS[task.metadata["domain"]]


def load_tasks(
    split: str,
    n: int | None = None,
    tiers: Iterable[int] | None = None,
    domains: Iterable[str] | None = None,
    mix: dict[int, float] | None = None,
) -> list[Task]:
    """ToolWorld tasks of ``split``, optionally filtered by tier/domain, first ``n`` kept.
    ``test-tier1`` is the test split generated with every task of tier 1 (ids
    ``tw-test-tier1-*``)."""
    if split == "test-tier1":
        tasks = load_tasks("test", None, tiers, domains, {1: 1.0})
        tasks = [replace(t, id=t.id.replace("tw-test-", "tw-test-tier1-", 1), split=split)
                 for t in tasks]
        return tasks[:n] if n is not None else tasks
    mix_items = tuple(sorted((mix or DEFAULT_MIX).items()))
    if split.startswith("rules-"):  # rules-train, rules-test, rules-transfer
        generated = generate_rules_split(split.removeprefix("rules-"), mix_items)
    else:
        generated = _generate_split(split, mix_items)
    tasks = [replace(t, tools=list(t.tools), metadata=dict(t.metadata)) for t in generated]
    if tiers is not None:
        keep = set(tiers)
        tasks = [t for t in tasks if t.metadata["tier"] in keep]
    if domains is not None:
        wanted = set(domains)
        unknown = wanted - set(DOMAINS)
        if unknown:
            raise ValueError(f"unknown ToolWorld domains: {sorted(unknown)}")
        tasks = [t for t in tasks if t.domain in wanted]
    return tasks[:n] if n is not None else tasks
