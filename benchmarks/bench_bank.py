"""Benchmark the experience bank and the dense retriever.

(a) Scale: grow one bank to 1k, 10k and 100k rows through ``Retriever.add`` (random unit
    384-d embeddings, so no model time; 512 rows per call, about one training step's
    successful rollouts) and time, at each size: adds per row, a batched top-3 search for 64
    tasks with both backends (torch matmul, FAISS flat), the same with a ``max_step`` filter,
    the full ``retrieve`` (MiniLM embedding of the 64 query texts + search + row fetch), and
    the index rebuild from SQLite on reopen.
(b) Quality: task texts from a template generator with 8 domains (until ToolWorld exists),
    embedded with the real all-MiniLM-L6-v2; the share of top-3 neighbours from the query's
    own domain, for held-out queries and for leave-one-task-out queries over the bank.

Run:  .venv/bin/python benchmarks/bench_bank.py   (writes benchmarks/results/bank.{json,md})
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
from lopd.experience.retriever import Embedder, Retriever

SIZES = (1_000, 10_000, 100_000)
BATCH_Q, J, ADD_BATCH, REPEATS = 64, 3, 512, 15
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


def bench_scale(embedder: Embedder, tmp: Path) -> list[dict]:
    import torch

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
            res[f"search_{backend}"] = timed(lambda t=tasks: retriever.search(q_vecs, t, j=J))
            res[f"search_{backend}_max_step"] = timed(
                lambda t=tasks, m=n // ADD_BATCH // 2: retriever.search(q_vecs, t, j=J, max_step=m))
        retriever.backend = "torch"
        if size == SIZES[-1]:
            torch.set_num_threads(2)
            res["search_torch_2threads"] = timed(lambda t=tasks: retriever.search(q_vecs, t, j=J))
            torch.set_num_threads(1)
        queries = list(zip(tasks, q_texts))
        res["embed_64_queries"] = timed(lambda: embedder.embed(q_texts), repeats=5)
        res["retrieve_with_embedding"] = timed(lambda q=queries: retriever.retrieve(q, j=J),
                                               repeats=5)
        t = time.perf_counter()
        reopened = Retriever(ExperienceBank(bank.path), embedder)
        res["rebuild_on_open_s"] = round(time.perf_counter() - t, 2)
        assert len(reopened) == size
        reopened.bank.close()
        res["file_mb"] = round(bank.stats()["file_bytes"] / 1e6, 1)
        print(json.dumps(res), flush=True)
        out.append(res)
    bank.close()
    return out


# -- (b) retrieval quality -----------------------------------------------------------------
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


def write_md(r: dict) -> str:
    m = r["machine"]
    lines = [
        "# Experience bank + retriever benchmark", "",
        f"Command: `{r['command']}`", "",
        (f"Machine: {m['cpu']} ({m['flags']}), {m['cores']} cores shared with other jobs "
         f"(load average {m['load_avg_start'][0]:.2f} at start, {r['load_avg_end'][0]:.2f} at "
         f"end), torch {m['torch']} with {m['torch_threads']} thread, faiss {m['faiss']}. "
         f"Whole run {r['total_s']} s."), "",
        "## (a) Scale (random unit 384-d embeddings; batch of 64 queries, top-3)", "",
        ("Median of 15 runs (5 for embed/retrieve; min and p90 are in bank.json). `search` "
         "excludes the query embedding and excludes each query's own task; `retrieve` adds "
         "MiniLM embedding of the 64 query texts and the SQLite row fetch. Adds go through "
         f"`Retriever.add` in calls of {ADD_BATCH} rows (embeddings given)."), "",
        ("| rows | add µs/row (retriever) | add µs/row (bank only) | search torch ms | "
         "search faiss ms | torch + max_step ms | faiss + max_step ms | embed 64 ms | "
         "retrieve ms | rebuild on open s | file MB |"),
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in r["scale"]:
        lines.append(
            f"| {s['rows']:,} | {s['retriever_add_us_per_row']} | {s['bank_add_us_per_row']} | "
            f"{s['search_torch']['median_ms']} | {s['search_faiss']['median_ms']} | "
            f"{s['search_torch_max_step']['median_ms']} | "
            f"{s['search_faiss_max_step']['median_ms']} | {s['embed_64_queries']['median_ms']} | "
            f"{s['retrieve_with_embedding']['median_ms']} | {s['rebuild_on_open_s']} | "
            f"{s['file_mb']} |")
    big = r["scale"][-1]
    lines += ["", (f"Torch search at {big['rows']:,} rows with 2 threads: "
                   f"{big['search_torch_2threads']['median_ms']} ms (median)."), ""]
    q = r["quality"]["minilm"]
    lines += [
        "## (b) Retrieval quality", "",
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


def notes(r: dict) -> list[str]:
    """Conclusions computed from the numbers (so they stay true when the run is redone)."""
    big, mid = r["scale"][-1], r["scale"][-2]
    t1, t2 = big["search_torch"]["median_ms"], big["search_torch_2threads"]["median_ms"]
    ms_per_1k = t1 / (big["rows"] / 1000)
    gflop = 2 * BATCH_Q * big["rows"] * 384 / 1e9
    q = r["quality"]
    new, loo = (q["minilm"][k]["same_domain_share_top3"]
                for k in ("held_out_new_phrasings", "leave_one_out"))
    return [
        "## Notes", "",
        (f"- Backend choice: the torch matmul is {big['search_faiss']['median_ms'] / t1:.1f}x "
         f"faster than FAISS flat search at {big['rows']:,} rows and "
         f"{mid['search_faiss']['median_ms'] / mid['search_torch']['median_ms']:.1f}x at "
         f"{mid['rows']:,} (same exact results, tested), so it is the default; the FAISS "
         "IndexIDMap(IndexFlatIP) is still maintained and selectable (`backend=\"faiss\"`)."),
        (f"- Speed target (top-3 for 64 tasks at 100k rows < 50 ms, without embedding): "
         f"{'met' if t1 < 50 else 'NOT met'} with 1 thread ({t1} ms), "
         f"{'met' if t2 < 50 else 'not met'} with 2 threads ({t2} ms). The search is one "
         f"{gflop:.2f} GFLOP fp32 matmul, i.e. {gflop / t1 * 1000:.0f} GFLOP/s on one core "
         "of this AVX2-only VM; it scales linearly, about "
         f"{ms_per_1k:.2f} ms per 1k rows, so 50 ms is reached near "
         f"{50 / ms_per_1k * 1000:,.0f} rows with 1 thread."),
        (f"- Query embedding dominates `retrieve`: {big['embed_64_queries']['median_ms']} ms "
         "for 64 texts with MiniLM on 1 thread; caching query vectors per task text (tasks "
         "repeat across steps) would remove most of it."),
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
    import faiss
    import torch

    from lopd.experience.retriever import HashingEmbedder

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    t0 = time.perf_counter()
    embedder = Embedder(batch_size=64)
    embedder.embed(["warm up"])
    r = {"command": ".venv/bin/python benchmarks/bench_bank.py", "machine": machine()}
    with tempfile.TemporaryDirectory() as d:
        r["scale"] = bench_scale(embedder, Path(d))
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
