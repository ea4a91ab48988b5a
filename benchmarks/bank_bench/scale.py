"""Part (a) of the bank benchmark: one bank grown to 1k, 10k and 100k rows of random embeddings.

Random unit 384-d vectors take the embedding model out of the picture, so this part measures the
bank and retriever themselves at each size: adding rows, exact search (torch and FAISS, with
and without a ``max_step`` filter), the IVF path, a full ``retrieve`` with query embedding (cold
and cached) and the index rebuild when the bank is reopened. Random vectors are also IVF's worst
case (no clusters).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from benchmarks.bank_bench.common import (
    ADD_BATCH,
    BATCH_Q,
    SIZES,
    J,
    bench_ivf,
    timed,
    two_thread_searches,
    unit,
)
from lopd.experience.bank import Experience, ExperienceBank
from lopd.experience.retriever import ANN_ROWS, Embedder, Retriever

BANK_ONLY_ROWS = 2048  # rows added to a throwaway bank to time the bank's own insert


def scale_rows(start: int, stop: int, rng: np.random.Generator) -> list[Experience]:
    emb = unit(rng, stop - start)
    return [Experience(task_id=f"s{i // 4}", domain=f"d{i % 8}", task_text=f"scale task {i // 4}",
                       trace=f"Task: scale task {i // 4}\n1. call f(x={i}) -> ok " + "r" * 200,
                       step_added=i // ADD_BATCH, source="rollout", embedding=emb[i - start])
            for i in range(start, stop)]


def grow(retriever: Retriever, n: int, size: int, rng: np.random.Generator) -> tuple[int, float]:
    """Add rows through ``Retriever.add`` in calls of ADD_BATCH until the bank has ``size``;
    returns the new row count and the seconds the adds took."""
    add_s = 0.0
    while n < size:
        rows = scale_rows(n, min(size, n + ADD_BATCH), rng)
        t = time.perf_counter()
        retriever.add(rows)
        add_s += time.perf_counter() - t
        n += len(rows)
    return n, add_s


def bank_only_add_seconds(path: Path, rng: np.random.Generator) -> float:
    """Seconds to add BANK_ONLY_ROWS rows of the same shape to a bank with no index."""
    with ExperienceBank(path) as b2:
        rows = scale_rows(0, BANK_ONLY_ROWS, rng)
        t = time.perf_counter()
        for s in range(0, len(rows), ADD_BATCH):
            b2.add(rows[s:s + ADD_BATCH])
        return time.perf_counter() - t


def exact_searches(retriever: Retriever, q_vecs: np.ndarray, tasks: list[str], n: int) -> dict:
    """Exact top-J search with each backend, without and with a ``max_step`` filter (half of
    the steps so far)."""
    res = {}
    for backend in ("torch", "faiss"):
        retriever.backend = backend
        res[f"search_{backend}"] = timed(
            lambda t=tasks: retriever.search(q_vecs, t, j=J, exact=True))
        res[f"search_{backend}_max_step"] = timed(
            lambda t=tasks, m=n // ADD_BATCH // 2: retriever.search(q_vecs, t, j=J,
                                                                    max_step=m, exact=True))
    retriever.backend = "torch"
    return res


def retrieve_timings(retriever: Retriever, embedder: Embedder, tasks: list[str],
                     q_texts: list[str]) -> dict:
    """Query embedding alone, then ``retrieve`` with the query cache off and warm."""
    queries = list(zip(tasks, q_texts))
    res = {"embed_64_queries": timed(lambda: embedder.embed(q_texts), repeats=5)}
    retriever.query_cache = 0  # cold: every query text embedded
    res["retrieve_with_embedding"] = timed(lambda q=queries: retriever.retrieve(q, j=J),
                                           repeats=5)
    retriever.query_cache = 4096  # warm: the 64 texts were seen before (LRU cache)
    res["retrieve_cached_queries"] = timed(lambda q=queries: retriever.retrieve(q, j=J))
    return res


def rebuild_on_open_seconds(bank: ExperienceBank, embedder: Embedder, size: int) -> float:
    """Seconds to reopen the bank file (index rebuilt from SQLite); checks the reopened one."""
    t = time.perf_counter()
    reopened = Retriever(ExperienceBank(bank.path), embedder)
    seconds = round(time.perf_counter() - t, 2)
    assert len(reopened) == size and (reopened.ann is not None) == (size >= ANN_ROWS)
    reopened.bank.close()
    return seconds


def bench_scale(embedder: Embedder, tmp: Path) -> list[dict]:
    rng = np.random.default_rng(0)
    bank = ExperienceBank(tmp / "scale.sqlite")
    retriever = Retriever(bank, embedder)
    q_vecs = unit(rng, BATCH_Q)
    q_texts = [f"Transfer {10 * i} dollars to account {i} and then check the balance"
               for i in range(BATCH_Q)]
    out, n = [], 0
    for size in SIZES:
        n, add_s = grow(retriever, n, size, rng)
        grown = size - (SIZES[SIZES.index(size) - 1] if size != SIZES[0] else 0)
        # bank-only insert cost (no index) on a throwaway bank, same row shape
        bank_s = bank_only_add_seconds(tmp / f"bankonly{size}.sqlite", rng)
        tasks = [f"s{i * 7}" for i in range(BATCH_Q)]
        res = {"rows": size,
               "retriever_add_us_per_row": round(add_s / grown * 1e6, 1),
               "bank_add_us_per_row": round(bank_s / BANK_ONLY_ROWS * 1e6, 1)}
        res.update(exact_searches(retriever, q_vecs, tasks, n))
        res.update(bench_ivf(retriever, [(q_vecs, tasks)]))
        if size == SIZES[-1]:
            res.update(two_thread_searches(retriever, [(q_vecs, tasks)]))
        res.update(retrieve_timings(retriever, embedder, tasks, q_texts))
        res["rebuild_on_open_s"] = rebuild_on_open_seconds(bank, embedder, size)
        res["file_mb"] = round(bank.stats()["file_bytes"] / 1e6, 1)
        print(json.dumps(res), flush=True)
        out.append(res)
    bank.close()
    return out
