"""Part (b) of the bank benchmark: real MiniLM embeddings of ToolWorld task prompts.

Random vectors (part a) are IVF's worst case; this is the case the bank actually sees: up to
25k distinct ToolWorld prompts (toolworld-train, then more from the same generator), 4 rows per
prompt, queried with training and test tasks. It measures exact vs IVF latency and IVF
recall@3 at 1k, 10k and 100k rows, with an nprobe sweep at 100k. The embeddings are cached on
disk because computing them takes minutes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from benchmarks.bank_bench.common import (
    ADD_BATCH,
    BATCH_Q,
    NPROBE,
    SIZES,
    J,
    bench_ivf,
    set_threads,
    timed,
    two_thread_searches,
)
from lopd.experience.bank import Experience, ExperienceBank
from lopd.experience.retriever import Embedder, Retriever

CACHE = Path(os.environ.get("LOPD_BENCH_CACHE", "/tmp/lopd-bench-cache"))
ROWS_PER_TASK = 4  # a task's rollouts share its task text, hence its embedding


def toolworld_prompts(n: int) -> tuple[list[str], int, list[str]]:
    """``n`` distinct ToolWorld prompts for the bank: the distinct toolworld-train prompts,
    then more from the same generator with fresh seeds (all 7 domains in turn, tiers 1-5 in
    turn, duplicates skipped); also how many came from toolworld-train, and the toolworld-test
    prompts (queries only, never in the bank)."""
    from lopd.envs import load_suite
    from lopd.envs.toolworld.tasks import DOMAINS, generate_spec, task_seed

    bank = list(dict.fromkeys(t.prompt for t in load_suite("toolworld-train")))
    n_train, test = len(bank), [t.prompt for t in load_suite("toolworld-test")]
    seen, domains, i = set(bank) | set(test), list(DOMAINS), 0
    while len(bank) < n:
        d = domains[i % len(domains)]
        prompt = generate_spec(d, 1 + i % 5, task_seed("bench-bank", d, i)).goal
        i += 1
        if prompt not in seen:
            seen.add(prompt)
            bank.append(prompt)
    return bank[:n], n_train, test


def cached_embeddings(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """MiniLM embeddings of ``texts``; the ones already in CACHE/toolworld_minilm.* are reused
    (embedding 25k prompts takes about 5 minutes here), new ones are added to it."""
    tpath, epath = CACHE / "toolworld_minilm.json", CACHE / "toolworld_minilm.npy"
    known: dict[str, np.ndarray] = {}
    if tpath.exists() and epath.exists():
        known = dict(zip(json.loads(tpath.read_text()), np.load(epath)))
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    if missing:
        set_threads(2)  # not a timed step
        known.update(zip(missing, embedder.embed(missing)))
        set_threads(1)
        CACHE.mkdir(parents=True, exist_ok=True)
        keys = list(known)
        tpath.write_text(json.dumps(keys))
        np.save(epath, np.stack([known[k] for k in keys]))
    return np.stack([known[t] for t in texts]).astype(np.float32)


def query_batches(bank_e: np.ndarray, test_e: np.ndarray) -> list[tuple[np.ndarray, list]]:
    """9 batches of 64 training tasks (every 3rd; their own rows excluded, as in training) and
    3 batches of 64 test tasks (not in the bank)."""
    train_q = list(range(0, 3 * 9 * BATCH_Q, 3))
    batches = [(bank_e[train_q[s:s + BATCH_Q]], [f"tw{i}" for i in train_q[s:s + BATCH_Q]])
               for s in range(0, len(train_q), BATCH_Q)]
    batches += [(test_e[s:s + BATCH_Q], [None] * BATCH_Q) for s in range(0, 3 * BATCH_Q, BATCH_Q)]
    return batches


def grow(retriever: Retriever, texts: list[str], bank_e: np.ndarray, n: int, size: int) -> int:
    """Add the next rows (ROWS_PER_TASK per prompt, in order) until the bank has ``size``."""
    while n < size:
        retriever.add([Experience(f"tw{r // ROWS_PER_TASK}", "toolworld",
                                  texts[r // ROWS_PER_TASK], f"trace {r}",
                                  step_added=r // ADD_BATCH,
                                  embedding=bank_e[r // ROWS_PER_TASK])
                       for r in range(n, min(size, n + ADD_BATCH))])
        n = min(size, n + ADD_BATCH)
    return n


def bench_toolworld(embedder: Embedder, tmp: Path) -> dict:
    """Exact vs IVF search and IVF recall@3 on real MiniLM embeddings of ToolWorld prompts."""
    texts, n_train, test = toolworld_prompts(SIZES[-1] // ROWS_PER_TASK)
    t = time.perf_counter()
    emb = cached_embeddings(embedder, texts + test)
    info = {"distinct_prompts": len(texts), "from_toolworld_train": n_train,
            "rows_per_prompt": ROWS_PER_TASK, "embed_or_cache_s": round(time.perf_counter() - t, 1)}
    bank_e, test_e = emb[:len(texts)], emb[len(texts):]
    batches = query_batches(bank_e, test_e)
    info["queries"] = sum(len(t) for _, t in batches)
    retriever = Retriever(ExperienceBank(tmp / "toolworld.sqlite"), embedder)
    out, n = [], 0
    for size in SIZES:
        n = grow(retriever, texts, bank_e, n, size)
        q0, t0 = batches[0]
        res = {"rows": size, "search_torch": timed(
            lambda q=q0, t=t0: retriever.search(q, t, j=J, exact=True))}
        res.update(bench_ivf(retriever, batches,
                             nprobes=(2, 4, 8, 16) if size == SIZES[-1] else (NPROBE,)))
        if size == SIZES[-1]:
            res.update(two_thread_searches(retriever, batches))
        print(json.dumps(res), flush=True)
        out.append(res)
    retriever.bank.close()
    return {**info, "sizes": out}
