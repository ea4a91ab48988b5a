"""Retrieval quality on ToolWorld: share of top-3 neighbours from the query task's domain.

The bank holds the condensed reference trajectories of training tasks (as a seeded LOPD run's
bank does); the queries are held-out test tasks, retrieved exactly as the trainer retrieves
(task prompt -> MiniLM embedding -> top-J by cosine, the query's own task excluded).

    .venv/bin/python benchmarks/bench_retrieval_toolworld.py [--bank-tasks 600] [--j 3]

Writes benchmarks/results/retrieval_toolworld.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from lopd.chat import ChatRenderer
from lopd.envs import load_suite
from lopd.experience.bank import ExperienceBank
from lopd.experience.condense import experience_from_trajectory
from lopd.experience.retriever import Embedder, Retriever
from lopd.models import load_tokenizer
from lopd.reference import reference_trajectory

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bank-tasks", type=int, default=600)
    parser.add_argument("--j", type=int, default=3)
    args = parser.parse_args()
    renderer = ChatRenderer(load_tokenizer())
    train = load_suite("toolworld-train", n=args.bank_tasks)
    test = load_suite("toolworld-test")
    started = time.perf_counter()
    rows = [experience_from_trajectory(reference_trajectory(t, renderer), step=0, source="seed")
            for t in train]
    with tempfile.TemporaryDirectory() as tmp:
        retriever = Retriever(ExperienceBank(Path(tmp) / "bank.sqlite"), Embedder())
        retriever.add(rows)
        build_s = time.perf_counter() - started
        mark = time.perf_counter()
        found = retriever.retrieve([(t.id, t.prompt) for t in test], j=args.j)
        query_s = time.perf_counter() - mark
    per_domain: dict[str, list[float]] = defaultdict(list)
    for task, hits in zip(test, found):
        per_domain[task.domain].append(sum(h.domain == task.domain for h in hits) / max(len(hits), 1))
    share = sum(sum(v) for v in per_domain.values()) / sum(len(v) for v in per_domain.values())
    result = {"bank_rows": len(rows), "queries": len(test), "j": args.j,
              "same_domain_share": round(share, 4),
              "by_domain": {k: round(sum(v) / len(v), 4) for k, v in sorted(per_domain.items())},
              "build_seconds": round(build_s, 1), "query_seconds_all": round(query_s, 2)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "retrieval_toolworld.json").write_text(json.dumps(result, indent=2))
    lines = ["# Retrieval quality on ToolWorld", "",
             f"`.venv/bin/python benchmarks/bench_retrieval_toolworld.py --bank-tasks {args.bank_tasks} --j {args.j}`",
             "", (f"Bank: condensed reference trajectories of {len(rows)} training tasks. Queries: "
                  f"the {len(test)} held-out test tasks (own task excluded). all-MiniLM-L6-v2."), "",
             f"**Share of top-{args.j} neighbours from the query's domain: {share:.3f}** (target >= 0.9)",
             "", "| domain | share |", "|---|---|"]
    lines += [f"| {k} | {v:.3f} |" for k, v in result["by_domain"].items()]
    (RESULTS / "retrieval_toolworld.md").write_text("\n".join(lines) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
