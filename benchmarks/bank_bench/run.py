"""A whole run of the bank benchmark (parts a, b, c, then bank.json and bank.md), or only the
re-render of bank.md from an existing bank.json (``bench_bank.py --render``)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks.bank_bench.common import RESULTS, machine, set_threads
from benchmarks.bank_bench.quality import bench_quality
from benchmarks.bank_bench.report import write_md
from benchmarks.bank_bench.scale import bench_scale
from benchmarks.bank_bench.toolworld import bench_toolworld
from lopd.experience.retriever import Embedder


def main() -> None:
    from lopd.experience.retriever import HashingEmbedder

    set_threads(1)
    t0 = time.perf_counter()
    embedder = Embedder(batch_size=64)
    embedder.embed(["warm up"])
    r = {"command": "flock /tmp/lopd-cpu.lock .venv/bin/python benchmarks/bench_bank.py",
         "machine": machine()}
    with tempfile.TemporaryDirectory() as d:
        r["scale"] = bench_scale(embedder, Path(d))
        r["toolworld"] = bench_toolworld(embedder, Path(d))
        r["quality"] = {"minilm": bench_quality(embedder, Path(d), "minilm"),
                        "hashing": bench_quality(HashingEmbedder(), Path(d), "hashing")}
    r["load_avg_end"] = os.getloadavg()
    r["total_s"] = round(time.perf_counter() - t0, 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bank.json").write_text(json.dumps(r, indent=2) + "\n")
    md = write_md(r)
    (RESULTS / "bank.md").write_text(md)
    print(md)


def render() -> None:
    """Re-render bank.md from an existing bank.json, no measuring."""
    (RESULTS / "bank.md").write_text(write_md(json.loads((RESULTS / "bank.json").read_text())))
