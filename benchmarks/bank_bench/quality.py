"""Part (c) of the bank benchmark: does the retriever return neighbours from the query's domain?

A bank of templated tasks from 8 domains (``quality_tasks``) is queried with held-out tasks in
new phrasings, held-out tasks in the bank's phrasings, and leave-one-out bank tasks; the score
is the share of top-3 neighbours from the query's own domain. It runs once with MiniLM and once
with the model-free hashing embedder as a reference.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from benchmarks.bank_bench.common import J
from benchmarks.bank_bench.quality_tasks import DOMAINS, generate_tasks
from lopd.experience.bank import Experience, ExperienceBank
from lopd.experience.retriever import Retriever


def same_domain_scores(retriever: Retriever, pairs: list[tuple[str, str]], ids: list) -> dict:
    """Retrieve top-J for each ``(domain, text)`` query (``ids``: the task id to exclude, or
    None); the same-domain share overall, per domain, and how often all J are same-domain."""
    doms = [d for d, _ in pairs]
    hits = retriever.retrieve([(i, text) for i, (_, text) in zip(ids, pairs)], j=J)
    same = [[e.domain == d for e in h] for h, d in zip(hits, doms)]
    per = {d: round(float(np.mean([s for s, dd in zip(same, doms) if dd == d])), 3)
           for d in DOMAINS}
    return {"queries": len(pairs),
            "same_domain_share_top3": round(float(np.mean(same)), 3),
            "all_three_same": round(float(np.mean([all(s) for s in same])), 3),
            "per_domain": per}


def bench_quality(embedder, tmp: Path, name: str) -> dict:
    bank = ExperienceBank(tmp / f"quality-{name}.sqlite")
    retriever = Retriever(bank, embedder)
    tasks = generate_tasks(60, seed=0)
    t = time.perf_counter()
    retriever.add([Experience(f"q{i}", d, text, f"trace {i}") for i, (d, text) in
                   enumerate(tasks)])
    embed_s = time.perf_counter() - t
    same_phrasing = generate_tasks(20, seed=1)
    new_phrasing = generate_tasks(30, seed=2, held_out=True)
    res = {"embedder": name, "domains": list(DOMAINS), "bank_tasks": len(tasks),
           "embed_bank_s": round(embed_s, 2)}
    for qname, pairs, ids in (
            ("held_out_new_phrasings", new_phrasing, [None] * len(new_phrasing)),
            ("held_out_bank_phrasings", same_phrasing, [None] * len(same_phrasing)),
            ("leave_one_out", tasks, [f"q{i}" for i in range(len(tasks))])):
        res[qname] = same_domain_scores(retriever, pairs, ids)
        print(name, qname, json.dumps(res[qname]), flush=True)
    bank.close()
    return res
