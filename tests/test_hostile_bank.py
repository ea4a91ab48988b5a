"""The experience bank refuses invalid rows loudly and stores identities exactly (or refuses
them); the retriever never loses hits to a non-finite embedding stored in the bank and never
stores one."""

from __future__ import annotations

import dataclasses
import sqlite3
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lopd.experience.bank import EMBED_DIM, Experience, ExperienceBank
from lopd.experience.retriever import HashingEmbedder, Retriever


def row(i: int, **changes) -> Experience:
    base = Experience(task_id=f"t{i}", domain="d", task_text=f"move money between accounts {i}",
                      trace=f"trace {i}", reward=1.0, step_added=0)
    return dataclasses.replace(base, **changes)


def unit(seed: int) -> np.ndarray:
    vec = np.random.default_rng(seed).standard_normal(EMBED_DIM).astype(np.float32)
    return vec / np.linalg.norm(vec)


nan_vec = np.full(EMBED_DIM, np.nan, dtype=np.float32)
inf_vec = np.where(np.arange(EMBED_DIM) == 5, np.inf, 0.1).astype(np.float32)


@pytest.mark.parametrize("changes, field", [
    ({"reward": float("nan")}, "reward"),
    ({"reward": float("inf")}, "reward"),
    ({"reward": -float("inf")}, "reward"),
    ({"reward": 10**400}, "reward"),
    ({"reward": None}, "reward"),
    ({"reward": "1.0"}, "reward"),
    ({"reward": True}, "reward"),
    ({"task_text": None}, "task_text"),
    ({"task_text": ""}, "task_text"),
    ({"task_text": " \n\t"}, "task_text"),
    ({"task_text": 42}, "task_text"),
    ({"task_id": ""}, "task_id"),
    ({"task_id": None}, "task_id"),
    ({"trace": None}, "trace"),
    ({"domain": None}, "domain"),
    ({"step_added": 1.5}, "step_added"),
    ({"step_added": "3"}, "step_added"),
    ({"source": "forged"}, "source"),
    ({"embedding": nan_vec}, "non-finite"),
    ({"embedding": inf_vec}, "non-finite"),
    ({"embedding": np.ones(EMBED_DIM - 1, dtype=np.float32)}, "values, bank expects"),
    ({"embedding": ["a"] * EMBED_DIM}, "not an array of numbers"),
])
def test_add_refuses_invalid_rows_by_row_and_field(tmp_path, changes, field):
    bank = ExperienceBank(tmp_path / "bank.sqlite")
    bank.add([row(0)])
    with pytest.raises(ValueError, match=field) as err:
        bank.add([row(1), row(2, **changes), row(3)])
    assert "experience 1 (task_id=" in str(err.value)
    assert "'t2'" in str(err.value) or "task_id" in changes
    assert [e.task_id for e in bank.all()] == ["t0"]  # nothing of the batch was stored


def test_set_embeddings_refuses_non_finite_values(tmp_path):
    bank = ExperienceBank(tmp_path / "bank.sqlite")
    (first,) = bank.add([row(0)])
    with pytest.raises(ValueError, match=f"row id {first}: embedding has {EMBED_DIM} non-finite"):
        bank.set_embeddings([first], nan_vec[None])
    assert bank.missing_embeddings()[0].id == first


def test_valid_edge_rows_are_kept(tmp_path):
    bank = ExperienceBank(tmp_path / "bank.sqlite")
    ids = bank.add([row(0, reward=0), row(1, reward=np.float32(0.5), step_added=np.int64(4)),
                    row(2, trace="", domain=""), row(3, task_text="tâche \x00 \u202e")])
    assert len(ids) == 4
    assert [e.reward for e in bank.all()] == [0.0, 0.5, 1.0, 1.0]


def test_unencodable_text_is_repaired_not_lost(tmp_path):
    bank = ExperienceBank(tmp_path / "bank.sqlite")
    (new,) = bank.add([row(0, task_text="bad \ud800 text", trace="echo \udfff")])
    stored = bank.get([new])[0]
    assert stored.task_text == "bad \ufffd text" and stored.trace == "echo \ufffd"
    assert bank.add([row(0, task_text="again", trace="echo \udfff")]) == []  # same trace: dedup


def _poison(path, ids, vec):
    """Write an embedding behind the bank's back (as an old or foreign writer could have)."""
    with sqlite3.connect(path) as conn:
        conn.executemany("UPDATE experiences SET embedding=? WHERE id=?",
                         [(vec.astype(np.float32).tobytes(), int(i)) for i in ids])


@pytest.mark.parametrize("backend", ["torch", "faiss"])
def test_stored_nan_row_is_repaired_and_hits_are_not_lost(tmp_path, backend):
    path = tmp_path / "bank.sqlite"
    bank = ExperienceBank(path)
    retriever = Retriever(bank, HashingEmbedder(), backend=backend, ann_rows=None)
    ids = retriever.add([row(i) for i in range(6)])
    _poison(path, ids[:2], nan_vec)
    with pytest.warns(RuntimeWarning, match="re-embedded"):
        fresh = Retriever(ExperienceBank(path), HashingEmbedder(), backend=backend, ann_rows=None)
    hits = fresh.retrieve([("query", "move money between accounts 0")], j=3)[0]
    assert len(hits) == 3 and all(np.isfinite(h.score) for h in hits)
    assert ids[0] in [h.id for h in hits]  # the repaired row is found again
    stored = ExperienceBank(path).get(ids[:2])
    assert all(np.isfinite(e.embedding).all() for e in stored)


class NaNEmbedder(HashingEmbedder):
    """Cannot embed texts containing 'broken' (gives NaN)."""

    def embed(self, texts):
        out = super().embed(texts)
        out[["broken" in t for t in texts]] = np.nan
        return out


def test_rows_that_cannot_be_repaired_are_left_out_with_a_warning(tmp_path):
    path = tmp_path / "bank.sqlite"
    bank = ExperienceBank(path)
    good = bank.add([row(i) for i in range(4)])
    broken = bank.add([row(9, task_text="broken task text")])
    bank.set_embeddings(good, HashingEmbedder().embed([row(i).task_text for i in range(4)]))
    _poison(path, broken, inf_vec)
    with pytest.warns(RuntimeWarning, match="left out of the index"):
        retriever = Retriever(bank, NaNEmbedder(), ann_rows=None)
    assert len(retriever) == 4
    assert retriever.sync() == 0  # not retried (and not re-warned) on every sync
    hits = retriever.retrieve([(None, "move money between accounts")], j=3)[0]
    assert len(hits) == 3 and broken[0] not in [h.id for h in hits]


def test_retriever_never_stores_a_non_finite_embedding(tmp_path):
    bank = ExperienceBank(tmp_path / "bank.sqlite")
    retriever = Retriever(bank, NaNEmbedder(), ann_rows=None)
    retriever.add([row(0)])
    with pytest.raises(ValueError, match="non-finite"):
        retriever.add([row(1, task_text="broken again")])
    assert bank.count() == 1 and len(retriever) == 1


# -- identities: stored exactly or refused -----------------------------------------------------

_LONE = ["t\ud800", "\udfff", "a\ud83dz", "ok\udc00", "\ud83d\ude00"]  # the last: a split pair
_ODD_IDS = ["t\x00", "\x00", " padded ", "\u202eevil", "\ufeffbom", "é" * 3, "\U0001f600",
            "a\r\nb", "x" * 10_000, "ACC-1'; DROP TABLE experiences; --", "\ufffd"]


@pytest.mark.parametrize("value", _LONE)
@pytest.mark.parametrize("field", ["task_id", "domain"])
def test_identities_that_would_change_are_refused(tmp_path, field, value):
    bank = ExperienceBank(tmp_path / "bank.sqlite")
    bank.add([row(0)])
    with pytest.raises(ValueError, match=f"experience 1 .*: {field} is not valid Unicode"):
        bank.add([row(1), row(2, **{field: value}), row(3)])
    retriever = Retriever(bank, HashingEmbedder(), ann_rows=None)
    with pytest.raises(ValueError, match=f"{field} is not valid Unicode"):
        retriever.add([row(4, **{field: value})])
    assert [e.task_id for e in bank.all()] == ["t0"] and len(retriever) == 1


def test_odd_but_valid_identities_round_trip_exactly(tmp_path):
    bank = ExperienceBank(tmp_path / "bank.sqlite")
    ids = bank.add([row(i, task_id=t, domain=t) for i, t in enumerate(_ODD_IDS)])
    assert [(e.task_id, e.domain) for e in bank.get(ids)] == [(t, t) for t in _ODD_IDS]
    retriever = Retriever(ExperienceBank(tmp_path / "other.sqlite"), HashingEmbedder(),
                          ann_rows=None)
    ids = retriever.add([row(i, task_id=t) for i, t in enumerate(_ODD_IDS)])
    assert [e.task_id for e in retriever.bank.get(ids)] == _ODD_IDS
    hits = retriever.retrieve([(_ODD_IDS[0], "move money between accounts 0")], j=3)[0]
    assert _ODD_IDS[0] not in [h.task_id for h in hits]  # self-exclusion sees the same id


@settings(max_examples=60, deadline=None)
@given(task_id=st.text(st.characters(blacklist_categories=()), min_size=1, max_size=12))
def test_any_task_id_round_trips_or_is_refused(task_id):
    with tempfile.TemporaryDirectory() as folder:
        bank = ExperienceBank(Path(folder) / "bank.sqlite")
        try:
            (new,) = bank.add([row(0, task_id=task_id)])
        except ValueError as err:
            assert "task_id" in str(err) and bank.count() == 0
            return
        assert bank.get([new])[0].task_id == task_id


def test_free_text_repair_is_only_the_lone_surrogates(tmp_path):
    retriever = Retriever(ExperienceBank(tmp_path / "bank.sqlite"), HashingEmbedder(),
                          ann_rows=None)
    (new,) = retriever.add([row(0, task_text="pay \ud800 \x00 \u202e é", trace="a\udfffb\n")])
    stored = retriever.bank.get([new])[0]
    assert stored.task_text == "pay \ufffd \x00 \u202e é" and stored.trace == "a\ufffdb\n"
    assert np.allclose(stored.embedding, HashingEmbedder().embed([stored.task_text])[0])
