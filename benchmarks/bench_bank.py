"""Benchmark the experience bank and the dense retriever.

(a) Scale: grow one bank to 1k, 10k and 100k rows through ``Retriever.add`` (random unit
    384-d embeddings, so no model time; 512 rows per call, about one training step's
    successful rollouts) and time, at each size: adds per row, a batched top-3 search for 64
    tasks with the exact backends (torch matmul, FAISS flat), the same with a ``max_step``
    filter, the IVF path (certified and approximate, with recall@3 against exact), the full
    ``retrieve`` (MiniLM embedding of the 64 query texts + search + row fetch; cold and with
    the query cache warm), and the index rebuild from SQLite on reopen.
(b) Realistic embeddings: the same searches on real all-MiniLM-L6-v2 embeddings of ToolWorld
    task prompts (toolworld-train plus more from the ToolWorld generator, 4 rows per prompt)
    at 1k, 10k and 100k rows, queried with training and test tasks; exact vs IVF latency and
    IVF recall@3, with an nprobe sweep at 100k. Random vectors are IVF's worst case; this is
    the case the bank actually sees.
(c) Quality: task texts from a template generator with 8 domains, embedded with the real
    all-MiniLM-L6-v2; the share of top-3 neighbours from the query's own domain, for held-out
    queries and for leave-one-task-out queries over the bank.

Threads: torch and FAISS are set to 1 thread, 2 where a result says so. Run it under
``flock /tmp/lopd-cpu.lock`` so that no other benchmark shares the 2 cores.

Run:  flock /tmp/lopd-cpu.lock .venv/bin/python benchmarks/bench_bank.py
      (writes benchmarks/results/bank.{json,md}; the first run embeds 25k prompts, ~5 min,
      cached under $LOPD_BENCH_CACHE or /tmp/lopd-bench-cache)
      .venv/bin/python benchmarks/bench_bank.py --render   (bank.md from bank.json only)

The code is in ``benchmarks/bank_bench/``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: benchmarks.*

from benchmarks.bank_bench.run import main, render

if __name__ == "__main__":
    if "--render" in sys.argv:  # re-render bank.md from an existing bank.json, no measuring
        render()
    else:
        main()
