"""ToolWorld task suites: deterministic splits, tier mix, and ``Task`` records.

Every task is generated from (domain, tier, seed) with a ``random.Random(seed)``; the seed is
derived from (split, domain, index) by SHA-256, so splits use disjoint seeds and the same call
always gives the same tasks. Within a domain, tiers follow the mix exactly (largest-remainder
rounding) in a seeded shuffled order, and domains are interleaved, so any prefix (``n=``) is a
representative sample. Test prompts that happen to equal a training prompt are skipped.

Splits: ``train`` (400 per training domain), ``test`` (200 over the training domains),
``transfer`` (120 tasks of the held-out ``smarthome`` domain, never in train or test);
``test-tier1`` (200 tier-1 tasks from the test seeds, none equal to a training prompt: a
held-out set of the tier the demo trains on, of which ``test`` holds 80); and
``rules-train`` / ``rules-test`` / ``rules-transfer``, the same discipline for the business-rules
tasks (``lopd.envs.toolworld.rules``).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from functools import lru_cache

from lopd.chat import format_tool_call
from lopd.envs.toolworld.banking import Banking
from lopd.envs.toolworld.base import Domain, TaskSpec
from lopd.envs.toolworld.calendar import Calendar
from lopd.envs.toolworld.filesystem import FileSystem
from lopd.envs.toolworld.inventory import Inventory
from lopd.envs.toolworld.shopping import Shopping
from lopd.envs.toolworld.smarthome import SmartHome
from lopd.envs.toolworld.travel import Travel
from lopd.types import Task

DOMAINS: dict[str, type[Domain]] = {
    cls.name: cls for cls in (Banking, Inventory, Calendar, FileSystem, Shopping, Travel, SmartHome)
}
TRAIN_DOMAINS = ["banking", "inventory", "calendar", "filesystem", "shopping", "travel"]
TRANSFER_DOMAINS = ["smarthome"]
DEFAULT_MIX = {1: 0.40, 2: 0.30, 3: 0.15, 4: 0.10, 5: 0.05}
SPLIT_SIZES = {"train": 400 * len(TRAIN_DOMAINS), "test": 200, "transfer": 120}


def task_seed(split: str, domain: str, index: int) -> int:
    digest = hashlib.sha256(f"toolworld:{split}:{domain}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def tier_schedule(n: int, mix: dict[int, float], rng: random.Random) -> list[int]:
    """``n`` tiers in exact proportion to ``mix`` (largest remainder), shuffled by ``rng``."""
    total = sum(mix.values())
    quotas = {tier: n * share / total for tier, share in mix.items()}
    counts = {tier: int(q) for tier, q in quotas.items()}
    leftovers = sorted(quotas, key=lambda t: (counts[t] - quotas[t], t))
    for tier in leftovers[: n - sum(counts.values())]:
        counts[tier] += 1
    schedule = [tier for tier, count in sorted(counts.items()) for _ in range(count)]
    rng.shuffle(schedule)
    return schedule


def generate_spec(domain: str, tier: int, seed: int) -> TaskSpec:
    return DOMAINS[domain].generate(random.Random(seed), tier)


def make_task(split: str, domain: str, index: int, tier: int, seed: int) -> Task:
    spec = generate_spec(domain, tier, seed)
    reference = "\n".join(format_tool_call(name, args) for name, args in spec.reference)
    return Task(
        id=f"tw-{split}-{domain}-{index}", split=split, domain=domain, prompt=spec.goal,
        tools=DOMAINS[domain].schemas(), reference=reference,
        metadata={"env": "toolworld", "domain": domain, "tier": tier, "seed": seed,
                  "checks": [c.description for c in spec.checks],
                  "reference_calls": len(spec.reference)},
    )


def _split_domains(split: str) -> list[str]:
    if split == "transfer":
        return list(TRANSFER_DOMAINS)
    if split in ("train", "test"):
        return list(TRAIN_DOMAINS)
    raise ValueError(f"unknown ToolWorld split {split!r} (train, test, transfer)")


def _per_domain(total: int, domains: Sequence[str]) -> dict[str, int]:
    base, extra = divmod(total, len(domains))
    return {d: base + (i < extra) for i, d in enumerate(domains)}


def _train_prompts(mix_items: tuple[tuple[int, float], ...]) -> set[str]:
    """Training prompts a test split must avoid: those of the default training split and,
    under another tier mix, of the training split with that mix too."""
    default = tuple(sorted(DEFAULT_MIX.items()))
    prompts = {t.prompt for t in _generate_split("train", default)}
    if mix_items != default:
        prompts |= {t.prompt for t in _generate_split("train", mix_items)}
    return prompts


@lru_cache(maxsize=16)
def _generate_split(split: str, mix_items: tuple[tuple[int, float], ...]) -> tuple[Task, ...]:
    mix = dict(mix_items)
    domains = _split_domains(split)
    counts = _per_domain(SPLIT_SIZES[split], domains)
    banned = _train_prompts(mix_items) if split == "test" else set()
    per_domain: dict[str, list[Task]] = {}
    for domain in domains:
        rng = random.Random(task_seed(split, domain, -1))
        tasks: list[Task] = []
        for index, tier in enumerate(tier_schedule(counts[domain], mix, rng)):
            attempt = 0
            while True:
                seed = task_seed(split, domain, index if attempt == 0 else -2 - index - attempt)
                task = make_task(split, domain, index, tier, seed)
                if task.prompt not in banned:
                    break
                attempt += 1
            tasks.append(task)
        per_domain[domain] = tasks
    interleaved = [per_domain[d][i] for i in range(max(counts.values())) for d in domains
                   if i < len(per_domain[d])]
    return tuple(interleaved)
