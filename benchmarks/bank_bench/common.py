"""What every part of the bank benchmark shares: sizes, timing, recall, the IVF measurements.

All parts time searches the same way (median / min / p90 after a warm-up call), run torch and
FAISS on one thread unless a result says two, and measure the IVF index the same way (certified
and approximate, recall@3 against exact search), so that their numbers are comparable.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from lopd.experience.bank import ExperienceBank
from lopd.experience.retriever import Retriever

SIZES = (1_000, 10_000, 100_000)
BATCH_Q, J, ADD_BATCH, REPEATS = 64, 3, 512, 15
NPROBE = 8  # the Retriever default
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def timed(fn, repeats: int = REPEATS) -> dict[str, float]:
    """Median / min / p90 wall time in ms of ``fn()`` after one warm-up call."""
    fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1000)
    ts.sort()
    return {"median_ms": round(statistics.median(ts), 2), "min_ms": round(ts[0], 2),
            "p90_ms": round(ts[int(0.9 * (len(ts) - 1))], 2)}


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, 384)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def set_threads(n: int) -> None:
    import faiss
    import torch

    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)


def recall_at_j(found: list[list[tuple[int, float]]], exact: list[list[tuple[int, float]]]
                ) -> float:
    """Share of the exact top-J that a search recovered, counting ties: a returned row is
    right if its score is >= the exact J-th score (rows of one task share one embedding, so
    which of several equal rows comes back is arbitrary)."""
    right = sum(sum(s >= ex[-1][1] - 1e-5 for _, s in f[:len(ex)]) for f, ex in zip(found, exact))
    return round(right / max(sum(len(ex) for ex in exact), 1), 4)


def ivf_view(retriever: Retriever) -> Retriever:
    """``retriever`` if it already has its IVF index (>= ANN_ROWS rows), else a second
    retriever on the same bank file with the IVF forced on (to measure it at small sizes)."""
    if retriever.ann is not None:
        return retriever
    return Retriever(ExperienceBank(retriever.bank.path), retriever.embedder, ann_rows=1)


def bench_ivf(retriever: Retriever, batches: list[tuple[np.ndarray, list]], recall: bool = True,
              nprobes: tuple[int, ...] = (NPROBE,)) -> dict:
    """IVF search timings on the first query batch (certified exact, then approximate with
    each of ``nprobes``), and (``recall``) recall@J against exact search over all batches."""
    r = ivf_view(retriever)
    q0, t0 = batches[0]
    exact = [h for q, t in batches for h in r.search(q, t, j=J, exact=True)]
    out = {"ivf_nlist": r.ann.nlist, "ivf_trained_rows": r.ann.trained_rows}
    for certify, nprobe in [(True, NPROBE)] + [(False, p) for p in nprobes]:
        r.certify, r.nprobe = certify, nprobe
        name = "search_ivf" if certify else f"search_ivf_approx_p{nprobe}"
        out[name] = timed(lambda: r.search(q0, t0, j=J))
        if recall:
            fallbacks, found = 0, []
            for q, t in batches:
                found += r.search(q, t, j=J)
                fallbacks += r.last_fallbacks
            out[name]["recall_at_3"] = recall_at_j(found, exact)
            out[name]["exact_fallback_share"] = round(fallbacks / len(found), 4)
    r.certify, r.nprobe = True, NPROBE
    if r is not retriever:
        r.bank.close()
    return out


def two_thread_searches(retriever: Retriever, batches: list[tuple[np.ndarray, list]]) -> dict:
    """Exact torch and IVF search timings on the first batch with 2 threads (``*_2threads``);
    back to 1 thread afterwards."""
    q0, t0 = batches[0]
    set_threads(2)
    out = {"search_torch_2threads": timed(
        lambda q=q0, t=t0: retriever.search(q, t, j=J, exact=True))}
    out.update({f"{k}_2threads": v for k, v in
                bench_ivf(retriever, batches, recall=False).items() if k.startswith("search")})
    set_threads(1)
    return out


def machine() -> dict:
    import faiss
    import torch

    info = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")),
               platform.processor())
    flags = next((ln for ln in info if ln.startswith("flags")), "")
    simd = [x for x in ("avx512f", "avx2", "amx_bf16") if f" {x}" in flags]
    return {"cpu": cpu, "flags": "+".join(simd) or "no avx", "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "torch": torch.__version__,
            "faiss": faiss.__version__, "load_avg_start": os.getloadavg()}
