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
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lopd.experience.bank import Experience, ExperienceBank
from lopd.experience.retriever import ANN_BACKOFF, ANN_ROWS, Embedder, Retriever

SIZES = (1_000, 10_000, 100_000)
BATCH_Q, J, ADD_BATCH, REPEATS = 64, 3, 512, 15
NPROBE = 8  # the Retriever default
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


def scale_rows(start: int, stop: int, rng: np.random.Generator) -> list[Experience]:
    emb = unit(rng, stop - start)
    return [Experience(task_id=f"s{i // 4}", domain=f"d{i % 8}", task_text=f"scale task {i // 4}",
                       trace=f"Task: scale task {i // 4}\n1. call f(x={i}) -> ok " + "r" * 200,
                       step_added=i // ADD_BATCH, source="rollout", embedding=emb[i - start])
            for i in range(start, stop)]


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


def bench_scale(embedder: Embedder, tmp: Path) -> list[dict]:
    rng = np.random.default_rng(0)
    bank = ExperienceBank(tmp / "scale.sqlite")
    retriever = Retriever(bank, embedder)
    q_vecs = unit(rng, BATCH_Q)
    q_texts = [f"Transfer {10 * i} dollars to account {i} and then check the balance"
               for i in range(BATCH_Q)]
    out, n = [], 0
    for size in SIZES:
        add_s, bank_s = 0.0, 0.0
        while n < size:
            rows = scale_rows(n, min(size, n + ADD_BATCH), rng)
            t = time.perf_counter()
            retriever.add(rows)
            add_s += time.perf_counter() - t
            n += len(rows)
        grown = size - (SIZES[SIZES.index(size) - 1] if size != SIZES[0] else 0)
        # bank-only insert cost (no index) on a throwaway bank, same row shape
        with ExperienceBank(tmp / f"bankonly{size}.sqlite") as b2:
            rows = scale_rows(0, 2048, rng)
            t = time.perf_counter()
            for s in range(0, len(rows), ADD_BATCH):
                b2.add(rows[s:s + ADD_BATCH])
            bank_s = time.perf_counter() - t
        tasks = [f"s{i * 7}" for i in range(BATCH_Q)]
        res = {"rows": size,
               "retriever_add_us_per_row": round(add_s / grown * 1e6, 1),
               "bank_add_us_per_row": round(bank_s / 2048 * 1e6, 1)}
        for backend in ("torch", "faiss"):
            retriever.backend = backend
            res[f"search_{backend}"] = timed(
                lambda t=tasks: retriever.search(q_vecs, t, j=J, exact=True))
            res[f"search_{backend}_max_step"] = timed(
                lambda t=tasks, m=n // ADD_BATCH // 2: retriever.search(q_vecs, t, j=J,
                                                                        max_step=m, exact=True))
        retriever.backend = "torch"
        res.update(bench_ivf(retriever, [(q_vecs, tasks)]))
        if size == SIZES[-1]:
            set_threads(2)
            res["search_torch_2threads"] = timed(
                lambda t=tasks: retriever.search(q_vecs, t, j=J, exact=True))
            res.update({f"{k}_2threads": v for k, v in
                        bench_ivf(retriever, [(q_vecs, tasks)], recall=False).items()
                        if k.startswith("search")})
            set_threads(1)
        queries = list(zip(tasks, q_texts))
        res["embed_64_queries"] = timed(lambda: embedder.embed(q_texts), repeats=5)
        retriever.query_cache = 0  # cold: every query text embedded
        res["retrieve_with_embedding"] = timed(lambda q=queries: retriever.retrieve(q, j=J),
                                               repeats=5)
        retriever.query_cache = 4096  # warm: the 64 texts were seen before (LRU cache)
        res["retrieve_cached_queries"] = timed(lambda q=queries: retriever.retrieve(q, j=J))
        t = time.perf_counter()
        reopened = Retriever(ExperienceBank(bank.path), embedder)
        res["rebuild_on_open_s"] = round(time.perf_counter() - t, 2)
        assert len(reopened) == size and (reopened.ann is not None) == (size >= ANN_ROWS)
        reopened.bank.close()
        res["file_mb"] = round(bank.stats()["file_bytes"] / 1e6, 1)
        print(json.dumps(res), flush=True)
        out.append(res)
    bank.close()
    return out


# -- (b) realistic embeddings: ToolWorld task prompts through MiniLM ----------------------
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


def bench_toolworld(embedder: Embedder, tmp: Path) -> dict:
    """Exact vs IVF search and IVF recall@3 on real MiniLM embeddings of ToolWorld prompts."""
    texts, n_train, test = toolworld_prompts(SIZES[-1] // ROWS_PER_TASK)
    t = time.perf_counter()
    emb = cached_embeddings(embedder, texts + test)
    info = {"distinct_prompts": len(texts), "from_toolworld_train": n_train,
            "rows_per_prompt": ROWS_PER_TASK, "embed_or_cache_s": round(time.perf_counter() - t, 1)}
    bank_e, test_e = emb[:len(texts)], emb[len(texts):]
    # 9 batches of 64 training tasks (their own rows excluded, as in training) + 3 of test tasks
    train_q = list(range(0, 3 * 9 * BATCH_Q, 3))
    batches = [(bank_e[train_q[s:s + BATCH_Q]], [f"tw{i}" for i in train_q[s:s + BATCH_Q]])
               for s in range(0, len(train_q), BATCH_Q)]
    batches += [(test_e[s:s + BATCH_Q], [None] * BATCH_Q) for s in range(0, 3 * BATCH_Q, BATCH_Q)]
    info["queries"] = sum(len(t) for _, t in batches)
    retriever = Retriever(ExperienceBank(tmp / "toolworld.sqlite"), embedder)
    out, n = [], 0
    for size in SIZES:
        while n < size:
            retriever.add([Experience(f"tw{r // ROWS_PER_TASK}", "toolworld",
                                      texts[r // ROWS_PER_TASK], f"trace {r}",
                                      step_added=r // ADD_BATCH,
                                      embedding=bank_e[r // ROWS_PER_TASK])
                           for r in range(n, min(size, n + ADD_BATCH))])
            n = min(size, n + ADD_BATCH)
        q0, t0 = batches[0]
        res = {"rows": size, "search_torch": timed(
            lambda q=q0, t=t0: retriever.search(q, t, j=J, exact=True))}
        res.update(bench_ivf(retriever, batches,
                             nprobes=(2, 4, 8, 16) if size == SIZES[-1] else (NPROBE,)))
        if size == SIZES[-1]:
            set_threads(2)
            res["search_torch_2threads"] = timed(
                lambda q=q0, t=t0: retriever.search(q, t, j=J, exact=True))
            res.update({f"{k}_2threads": v for k, v in
                        bench_ivf(retriever, batches, recall=False).items()
                        if k.startswith("search")})
            set_threads(1)
        print(json.dumps(res), flush=True)
        out.append(res)
    retriever.bank.close()
    return {**info, "sizes": out}


# -- (c) retrieval quality -----------------------------------------------------------------
NAMES = ["Alice", "Bob", "Carlos", "Dana", "Emeka", "Fatima", "Grace", "Hiro", "Ines", "Jonas"]
CITIES = ["Paris", "Tokyo", "Lisbon", "Denver", "Nairobi", "Oslo", "Lima", "Seoul", "Cairo"]
DAYS = ["Monday", "Tuesday", "Friday", "tomorrow", "next week", "the 14th", "Sunday morning"]
# Per domain: phrasings used for the bank, then (after "|") held-out phrasings with other
# wording, used only for queries, so that matching template words is not enough.
DOMAINS: dict[str, tuple[list[str], list[str]]] = {
    "banking": ([
        "Transfer {amt} dollars from my checking account to {name}.",
        "What's the current balance on my savings account?",
        "Pay my {bill} bill of ${amt} from the joint account.",
        "Show the last {k} card transactions over ${amt}.",
        "Move ${amt} into savings every {day} starting {day2}.",
        "Freeze my debit card, I think I lost it in {city}.",
    ], [
        "Wire {amt} bucks to {name}, please.",
        "How much money do I have left?",
        "Did {name}'s reimbursement of {amt} euros come through yet?",
    ]),
    "calendar": ([
        "Schedule a meeting with {name} on {day} at {hour}.",
        "Move my {appt} appointment from {day} to {day2}.",
        "What events do I have on {day}?",
        "Cancel the {appt} on {day} and tell {name}.",
        "Find a free {k}-hour slot for {name} and me {day}.",
        "Add a reminder for {name}'s birthday on {day}.",
    ], [
        "Put a call with {name} on my agenda for {day}.",
        "Am I busy {day} around {hour}?",
        "Push the {appt} back by a week.",
    ]),
    "shopping": ([
        "Order {k} packs of {item} and ship them to my home address.",
        "Add a {item} under ${amt} to my cart.",
        "Where is my order of {item}? It was due {day}.",
        "Return the {item} I bought last week and get a refund.",
        "Compare prices for {item} and buy the cheapest one.",
        "Apply the discount code SAVE{k} to my basket with the {item}.",
    ], [
        "I want my money back for the broken {item}.",
        "Has the parcel with the {item} shipped?",
        "Get me {item}, whatever is least expensive online.",
    ]),
    "travel": ([
        "Book a flight from {city} to {city2} on {day}.",
        "Find a hotel in {city} for {k} nights under ${amt} per night.",
        "Rent a car at the {city} airport from {day} to {day2}.",
        "Is my flight to {city2} on {day} delayed?",
        "Change my return train from {city} to {day2}.",
        "Get me a window seat on the {city}-{city2} flight.",
    ], [
        "I need plane tickets and somewhere to stay in {city}.",
        "Will I land in {city2} on time {day}?",
        "Reserve a room near the old town in {city} for {k} nights.",
    ]),
    "file_system": ([
        "Move {file} into the {folder} folder.",
        "Delete all {ext} files older than {k} days in {folder}.",
        "Create a directory called {folder} under my home directory.",
        "Find every file named {file} on the disk.",
        "Rename {file} to {file2} and copy it to {folder}.",
        "How much disk space does the {folder} directory use?",
    ], [
        "Clean up the old {ext} logs, they are eating my storage.",
        "Where did I save {file}?",
        "Zip up everything in {folder} so I can back it up.",
    ]),
    "smart_home": ([
        "Turn off the lights in the {room}.",
        "Set the thermostat in the {room} to {temp} degrees.",
        "Lock the front door and arm the alarm at {hour}.",
        "Dim the {room} lamps to {k}0 percent.",
        "Start the robot vacuum in the {room} when I leave.",
        "Play relaxing music on the {room} speaker.",
    ], [
        "It's too cold in the {room}, warm it up.",
        "Make it darker in the {room}.",
        "Did I leave the garage open?",
    ]),
    "email": ([
        "Email {name} the {doc} before {day}.",
        "Reply to {name}'s last message saying I'll be late.",
        "Find the email from {name} about the {doc}.",
        "Forward the {doc} thread to {name2} and cc {name}.",
        "Draft a thank-you note to {name} for the {doc}.",
        "Mark all unread newsletters as read and archive them.",
    ], [
        "Let {name} know in writing that the {doc} is attached.",
        "Anything new in my inbox from {name}?",
        "Write back to {name2}: I can't make it {day}.",
    ]),
    "food_delivery": ([
        "Order a large {food} from the nearest place, delivered by {hour}.",
        "Reorder my usual {food} from last {day}.",
        "Find a restaurant that delivers {food} to {city} street.",
        "How long until my {food} delivery arrives?",
        "Add extra cheese to my {food} order and tip ${k}.",
        "Get {k} {food} meals for the team lunch {day}.",
    ], [
        "I'm hungry, get me some {food} for dinner.",
        "Where's the courier with my {food}?",
        "Lunch for {k} people at the office, {food} is fine.",
    ]),
}
SLOTS = {
    "amt": lambda r: str(r.choice([20, 45, 120, 300, 75, 1500])), "name": lambda r: r.choice(NAMES),
    "name2": lambda r: r.choice(NAMES), "city": lambda r: r.choice(CITIES),
    "city2": lambda r: r.choice(CITIES), "day": lambda r: r.choice(DAYS),
    "day2": lambda r: r.choice(DAYS), "k": lambda r: str(r.randint(2, 9)),
    "hour": lambda r: r.choice(["9am", "noon", "3pm", "6:30pm", "8pm"]),
    "bill": lambda r: r.choice(["electricity", "phone", "internet", "water"]),
    "appt": lambda r: r.choice(["dentist", "doctor", "haircut", "standup", "review"]),
    "item": lambda r: r.choice(["AA batteries", "running shoes", "coffee beans", "a desk lamp",
                                "headphones", "printer paper"]),
    "month": lambda r: r.choice(["March", "June", "October"]),
    "file": lambda r: r.choice(["report.pdf", "notes.txt", "budget.xlsx", "photo.jpg"]),
    "file2": lambda r: r.choice(["final.pdf", "old_notes.txt", "q3.xlsx"]),
    "folder": lambda r: r.choice(["archive", "projects", "Downloads", "backup", "tmp"]),
    "ext": lambda r: r.choice([".log", ".tmp", ".bak"]),
    "room": lambda r: r.choice(["living room", "kitchen", "bedroom", "office", "hallway"]),
    "temp": lambda r: str(r.randint(17, 24)),
    "doc": lambda r: r.choice(["invoice", "contract", "slides", "meeting notes", "proposal"]),
    "food": lambda r: r.choice(["pizza", "sushi", "pad thai", "burrito", "ramen", "salad"]),
}


def generate_tasks(n_per_domain: int, seed: int, held_out: bool = False
                   ) -> list[tuple[str, str]]:
    """``(domain, text)`` pairs: each domain's bank (or held-out) phrasings filled with random
    entities, every phrasing used at least once."""
    r = random.Random(seed)
    out = []
    for domain, (seen, unseen) in DOMAINS.items():
        templates = unseen if held_out else seen
        for i in range(n_per_domain):
            tpl = templates[i] if i < len(templates) else r.choice(templates)
            out.append((domain, tpl.format(**{k: f(r) for k, f in SLOTS.items()})))
    return out


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
        doms = [d for d, _ in pairs]
        hits = retriever.retrieve([(i, text) for i, (_, text) in zip(ids, pairs)], j=J)
        same = [[e.domain == d for e in h] for h, d in zip(hits, doms)]
        per = {d: round(float(np.mean([s for s, dd in zip(same, doms) if dd == d])), 3)
               for d in DOMAINS}
        res[qname] = {"queries": len(pairs),
                      "same_domain_share_top3": round(float(np.mean(same)), 3),
                      "all_three_same": round(float(np.mean([all(s) for s in same])), 3),
                      "per_domain": per}
        print(name, qname, json.dumps(res[qname]), flush=True)
    bank.close()
    return res


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


def ms(x: dict) -> str:
    return f"{x['median_ms']}"


def write_md(r: dict) -> str:
    m = r["machine"]
    lines = [
        "# Experience bank + retriever benchmark", "",
        f"Command: `{r['command']}`", "",
        (f"Machine: {m['cpu']} ({m['flags']}), {m['cores']} cores shared with other jobs "
         f"(load average {m['load_avg_start'][0]:.2f} at start, {r['load_avg_end'][0]:.2f} at "
         f"end; other benchmarks were kept off the CPU with `flock /tmp/lopd-cpu.lock`, "
         f"other non-benchmark jobs may have run), torch {m['torch']} and faiss "
         f"{m['faiss']} with 1 thread unless a column says 2 threads. Whole run "
         f"{r['total_s']} s."), "",
        ("Search paths: *exact* = the torch fp32 matmul (or FAISS flat); *IVF* = "
         "`CertifiedIVF` (lopd/experience/ann.py), used by the retriever from "
         f"{ANN_ROWS:,} rows on: nprobe={NPROBE} lists, then every list whose angular-radius "
         "bound could still beat the 3rd score, so its answer is provably the exact one; "
         "queries it cannot prove within 25% of the rows go to the exact search (*fallback*; "
         f"when most do, the next {ANN_BACKOFF} searches skip the IVF). "
         f"*IVF approx* = first round only (nprobe={NPROBE}). Below {ANN_ROWS:,} rows the IVF "
         "numbers come from a second retriever forced to build one. recall@3 counts ties "
         "(a row is right if its score >= the exact 3rd score)."), "",
        "## (a) Scale (random unit 384-d embeddings; batch of 64 queries, top-3)", "",
        ("Median of 15 runs (5 for embed/retrieve; min and p90 are in bank.json). `search` "
         "excludes the query embedding and excludes each query's own task; `retrieve` adds "
         "MiniLM embedding of the 64 query texts (cold: cache off; cached: all 64 in the "
         "query cache) and the SQLite row fetch. Adds go through "
         f"`Retriever.add` in calls of {ADD_BATCH} rows (embeddings given; at {ANN_ROWS:,} "
         "rows this includes the IVF training). Random vectors are the worst case for IVF: "
         "no clusters."), "",
        ("| rows | add µs/row (retriever) | add µs/row (bank only) | exact torch ms | "
         "exact faiss ms | torch + max_step ms | faiss + max_step ms | IVF ms (fallback "
         "share) | IVF approx ms (recall@3) | embed 64 ms | retrieve cold ms | retrieve "
         "cached ms | rebuild on open s | file MB |"),
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ap = f"search_ivf_approx_p{NPROBE}"
    for s in r["scale"]:
        lines.append(
            f"| {s['rows']:,} | {s['retriever_add_us_per_row']} | {s['bank_add_us_per_row']} | "
            f"{ms(s['search_torch'])} | {ms(s['search_faiss'])} | "
            f"{ms(s['search_torch_max_step'])} | {ms(s['search_faiss_max_step'])} | "
            f"{ms(s['search_ivf'])} ({s['search_ivf']['exact_fallback_share']}) | "
            f"{ms(s[ap])} ({s[ap]['recall_at_3']}) | {ms(s['embed_64_queries'])} | "
            f"{ms(s['retrieve_with_embedding'])} | {ms(s['retrieve_cached_queries'])} | "
            f"{s['rebuild_on_open_s']} | {s['file_mb']} |")
    big = r["scale"][-1]
    lines += ["", (f"At {big['rows']:,} rows with 2 threads: exact torch "
                   f"{ms(big['search_torch_2threads'])} ms, IVF {ms(big['search_ivf_2threads'])}"
                   f" ms, IVF approx {ms(big[ap + '_2threads'])} ms (medians)."), ""]
    lines += toolworld_md(r["toolworld"])
    q = r["quality"]["minilm"]
    lines += [
        "## (c) Retrieval quality", "",
        (f"{len(q['domains'])} template domains ({', '.join(q['domains'])}); bank of "
         f"{q['bank_tasks']} tasks from 6 phrasings per domain. Queries: held-out tasks in 3 "
         "*other* phrasings per domain (new wording), held-out tasks in the bank's phrasings "
         "(new entities), and leave-one-out (each bank task, its own row excluded). The "
         "hashing bag-of-words embedder is a model-free reference."), "",
        "| embedder | queries | n | same-domain share of top-3 | all 3 same domain |",
        "|---|---|---:|---:|---:|"]
    for emb_name, res in r["quality"].items():
        for name in ("held_out_new_phrasings", "held_out_bank_phrasings", "leave_one_out"):
            lines.append(f"| {emb_name} | {name} | {res[name]['queries']} | "
                         f"{res[name]['same_domain_share_top3']} | "
                         f"{res[name]['all_three_same']} |")
    lines += ["", "MiniLM per domain (new phrasings): " + ", ".join(
        f"{d} {v}" for d, v in q["held_out_new_phrasings"]["per_domain"].items()), ""]
    lines += notes(r)
    return "\n".join(lines) + "\n"


def toolworld_md(tw: dict) -> list[str]:
    ap = f"search_ivf_approx_p{NPROBE}"
    lines = [
        "## (b) Realistic embeddings: MiniLM on ToolWorld task prompts", "",
        (f"Bank texts: {tw['distinct_prompts']:,} distinct ToolWorld prompts -- the "
         f"{tw['from_toolworld_train']:,} distinct `toolworld-train` prompts, then prompts from "
         "the same ToolWorld generator with fresh seeds (7 domains, tiers 1-5 in turn) -- "
         "embedded with all-MiniLM-L6-v2 (cached under /tmp/lopd-bench-cache), "
         f"{tw['rows_per_prompt']} rows per prompt (a task's rollouts share its task-text "
         "embedding, as in the real bank); the first N rows make the N-row bank. Queries: "
         f"{tw['queries']} = 576 toolworld-train tasks (every 3rd; their own rows excluded, as "
         "in training) + 192 toolworld-test tasks (not in the bank), in batches of 64; times "
         "are for the first batch (training tasks), recall over all of them."), "",
        ("| rows | exact torch ms | IVF ms | IVF recall@3 | IVF fallback share | "
         f"IVF approx (nprobe {NPROBE}) ms | approx recall@3 | IVF lists (trained on rows) |"),
        "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in tw["sizes"]:
        lines.append(
            f"| {s['rows']:,} | {ms(s['search_torch'])} | {ms(s['search_ivf'])} | "
            f"{s['search_ivf']['recall_at_3']} | {s['search_ivf']['exact_fallback_share']} | "
            f"{ms(s[ap])} | {s[ap]['recall_at_3']} | {s['ivf_nlist']} "
            f"({s['ivf_trained_rows']:,}) |")
    big = tw["sizes"][-1]
    sweep = [k for k in big if k.startswith("search_ivf_approx_p") and "2threads" not in k]
    lines += ["", f"IVF approx at {big['rows']:,} rows by nprobe: " + ", ".join(
        f"{k.rsplit('_p', 1)[1]}: {ms(big[k])} ms, recall@3 {big[k]['recall_at_3']}"
        for k in sweep) + ".", "",
        (f"At {big['rows']:,} rows with 2 threads: exact torch {ms(big['search_torch_2threads'])}"
         f" ms, IVF {ms(big['search_ivf_2threads'])} ms, IVF approx "
         f"{ms(big[ap + '_2threads'])} ms."), ""]
    return lines


def notes(r: dict) -> list[str]:
    """Conclusions computed from the numbers (so they stay true when the run is redone)."""
    big, mid = r["scale"][-1], r["scale"][-2]
    tw = r["toolworld"]["sizes"][-1]
    t1, t2 = big["search_torch"]["median_ms"], big["search_torch_2threads"]["median_ms"]
    ivf, ivf_rec = tw["search_ivf"]["median_ms"], tw["search_ivf"]["recall_at_3"]
    ap = f"search_ivf_approx_p{NPROBE}"
    gflop = 2 * BATCH_Q * big["rows"] * 384 / 1e9
    q = r["quality"]
    new, loo = (q["minilm"][k]["same_domain_share_top3"]
                for k in ("held_out_new_phrasings", "leave_one_out"))
    return [
        "## Notes", "",
        (f"- Speed target (top-3 for 64 tasks at 100k rows < 50 ms, without embedding): on "
         f"MiniLM embeddings of ToolWorld prompts the certified IVF takes {ivf} ms with 1 "
         f"thread ({'met' if ivf < 50 else 'NOT met'}) at recall@3 {ivf_rec} "
         f"(fallback share {tw['search_ivf']['exact_fallback_share']}), vs {tw['search_torch']['median_ms']} "
         f"ms for the exact matmul; the approximate first round alone takes "
         f"{tw[ap]['median_ms']} ms at recall@3 {tw[ap]['recall_at_3']}."),
        (f"- On random unit vectors (no clusters) the radius bounds prune nothing, so the "
         f"certified IVF sends {big['search_ivf']['exact_fallback_share']:.0%} of the queries "
         f"to the exact search, and the retriever then skips the IVF for the next "
         f"{ANN_BACKOFF} searches: {big['search_ivf']['median_ms']} ms (median) vs {t1} ms "
         f"exact (1 thread; {big['search_ivf_2threads']['median_ms']} vs {t2} ms with 2; p90 "
         f"{big['search_ivf']['p90_ms']} ms, an IVF try included). Approximate "
         f"IVF is fast there ({big[ap]['median_ms']} ms) but useless (recall@3 "
         f"{big[ap]['recall_at_3']}), which is why answers are certified by default. The exact "
         f"matmul is {gflop:.2f} GFLOP, {gflop / t1 * 1000:.0f} GFLOP/s on one AVX2 core."),
        (f"- Exact backends: the torch matmul is {big['search_faiss']['median_ms'] / t1:.1f}x "
         f"faster than FAISS flat search at {big['rows']:,} rows and "
         f"{mid['search_faiss']['median_ms'] / mid['search_torch']['median_ms']:.1f}x at "
         f"{mid['rows']:,} (same results, tested), so it is the default exact search."),
        (f"- Query embedding dominates a cold `retrieve`: {big['embed_64_queries']['median_ms']}"
         f" ms for 64 texts with MiniLM on 1 thread; with the texts in the retriever's LRU "
         f"query cache (tasks repeat across steps) `retrieve` takes "
         f"{big['retrieve_cached_queries']['median_ms']} ms at {big['rows']:,} random rows "
         "(there the search itself is exact-speed; on clustered embeddings it is the IVF's)."),
        (f"- Quality: with the bank's phrasings MiniLM keeps {loo} of top-3 neighbours in the "
         f"query's domain (target 0.9 met), but so does bag-of-words hashing "
         f"({q['hashing']['leave_one_out']['same_domain_share_top3']}), since templates "
         f"share words. With unseen phrasings MiniLM gives {new} (target "
         f"{'met' if new >= 0.9 else 'not met'}) vs "
         f"{q['hashing']['held_out_new_phrasings']['same_domain_share_top3']} for hashing; "
         "in a diagnostic run most misses were ambiguous requests (\"Anything new in my inbox "
         "from X?\" -> calendar, \"Did X's reimbursement come through?\" -> email)."),
        "",
    ]


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


if __name__ == "__main__":
    if "--render" in sys.argv:  # re-render bank.md from an existing bank.json, no measuring
        (RESULTS / "bank.md").write_text(write_md(json.loads((RESULTS / "bank.json").read_text())))
    else:
        main()
