"""Inverted-file (IVF) index that can prove its top-J answer is exact, for large banks.

Why: exact retrieval over a large bank is one fp32 matmul whose cost grows with the row count
(about 1 ms per 1k rows for 64 queries on one AVX2 core), so at 100k rows it misses the 50 ms
budget. An IVF index scans only the lists (k-means clusters) near each query, which is fast
but normally approximate. Here every list also keeps its *angular radius* rho (the largest
angle between a member and the list's unit centroid), so for a unit query q at angle theta to
that centroid no member can score more than ``cos(max(0, theta - rho))`` (triangle inequality
on the sphere). A search then runs in two rounds:

1. probe the ``nprobe`` lists with the highest bound and keep the best J *eligible* rows;
2. probe every other list whose bound is still >= the J-th score found (if that is at most
   ``max_scan`` of the rows; otherwise give up on that query).

After round 2 no unprobed row can beat the answer, so it equals the exact search (up to ties
and float rounding). Queries that give up (bounds too loose: e.g. random, unclustered
vectors) or find fewer than J eligible rows are reported as not done, and the caller answers
them with its exact search. ``certify=False`` stops after round 1: plain approximate IVF.

Maintenance: ``add`` assigns rows to the nearest centroid and widens that list's radius;
``remove`` keeps radii as they are (still valid upper bounds). The centroids come from
spherical k-means on the vectors given at construction; the caller decides when to rebuild
(see ``Retriever``). Scores are inner products of unit vectors (cosine).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

BOUND_SLACK = 1e-4  # added to every bound, above float32 rounding of the scores compared to it
COS_ERR = 3e-5  # worst float32 rounding of a 384-term dot product of unit vectors (~384 * 2^-24)


def default_nlist(n: int) -> int:
    """Number of lists for ``n`` rows: about 4 * sqrt(n) (1264 at 100k), at least 16."""
    return max(16, int(4 * np.sqrt(n)))


class CertifiedIVF:
    """IVF-Flat (inner product) over unit vectors keyed by int64 ids; see the module docstring.

    ``vectors`` (n, dim) unit float32 train the centroids (a sample of ``points_per_list`` per
    list, ``niter`` k-means iterations, seeded) and are then added with ``ids``.
    """

    def __init__(self, vectors: np.ndarray, ids: np.ndarray, nlist: int | None = None,
                 niter: int = 10, points_per_list: int = 16, seed: int = 1234):
        import faiss

        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        n, self.dim = vectors.shape
        self.nlist = min(nlist or default_nlist(n), n)
        km = faiss.Kmeans(self.dim, self.nlist, niter=niter, spherical=True, seed=seed,
                          max_points_per_centroid=points_per_list, min_points_per_centroid=1)
        km.train(vectors)
        self.centroids = km.centroids / np.maximum(
            np.linalg.norm(km.centroids, axis=1, keepdims=True), 1e-12)  # (L, dim)
        self.quantizer = faiss.IndexFlatIP(self.dim)
        self.quantizer.add(self.centroids)
        self.index = faiss.IndexIVFFlat(self.quantizer, self.dim, self.nlist,
                                        faiss.METRIC_INNER_PRODUCT)
        self.radius = np.zeros(self.nlist, dtype=np.float32)  # (L,) angular radius per list
        self.sizes = np.zeros(self.nlist, dtype=np.int64)  # (L,) rows per list
        self.trained_rows = n
        self.add(vectors, ids)

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        """Add unit rows (n, dim) under ``ids`` (n,), each to its nearest centroid's list."""
        import faiss

        if len(ids) == 0:
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        assign = np.ascontiguousarray(self.quantizer.search(vectors, 1)[1][:, 0])
        for s in range(0, len(ids), 8192):  # angle from the chord: accurate near 0, unlike acos
            a = assign[s:s + 8192]
            chord = np.linalg.norm(vectors[s:s + 8192] - self.centroids[a], axis=1)
            np.maximum.at(self.radius, a, 2 * np.arcsin(np.minimum(1.0, chord / 2)) * 1.0001)
        np.add.at(self.sizes, assign, 1)
        self.index.add_core(len(ids), faiss.swig_ptr(vectors), faiss.swig_ptr(ids),
                            faiss.swig_ptr(assign))

    def remove(self, ids: np.ndarray) -> None:
        if self.index.remove_ids(np.ascontiguousarray(ids, dtype=np.int64)):
            invlists = self.index.invlists
            self.sizes = np.array([invlists.list_size(i) for i in range(self.nlist)],
                                  dtype=np.int64)

    def _bounds(self, q: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(B, L) centroid cosines and upper bounds on any member's score (-inf if empty)."""
        cos = q @ self.centroids.T
        theta = np.arccos(np.clip(cos + COS_ERR, -1.0, 1.0))  # never above the true angle
        bound = np.cos(np.maximum(0.0, theta - self.radius[None, :])) + BOUND_SLACK
        return cos, np.where(sizes[None, :] > 0, bound, -np.inf)

    def _probe(self, q: np.ndarray, lists: np.ndarray, cos: np.ndarray, k: int,
               selector) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, ids) of each query over its own ``lists`` (B, m); -1 = skip."""
        import faiss

        lists = np.ascontiguousarray(lists, dtype=np.int64)
        cq = np.ascontiguousarray(np.take_along_axis(cos, np.maximum(lists, 0), 1),
                                  dtype=np.float32)
        D = np.empty((len(q), k), dtype=np.float32)
        I = np.empty((len(q), k), dtype=np.int64)
        params = faiss.SearchParametersIVF(nprobe=lists.shape[1], sel=selector)
        self.index.nprobe = lists.shape[1]
        self.index.search_preassigned_c(len(q), faiss.swig_ptr(q), k, faiss.swig_ptr(lists),
                                        faiss.swig_ptr(cq), faiss.swig_ptr(D),
                                        faiss.swig_ptr(I), False, params)
        return D, I

    @staticmethod
    def _best(D: np.ndarray, I: np.ndarray, ok: np.ndarray, j: int
              ) -> tuple[np.ndarray, np.ndarray]:
        """Best ``j`` eligible (scores, ids) per row, best first; (-inf, -1) padded."""
        S = np.where(ok & (I >= 0), D, -np.inf)
        if S.shape[1] < j:
            pad = j - S.shape[1]
            S = np.pad(S, ((0, 0), (0, pad)), constant_values=-np.inf)
            I = np.pad(I, ((0, 0), (0, pad)), constant_values=-1)
        top = np.argsort(-S, axis=1, kind="stable")[:, :j]
        s = np.take_along_axis(S, top, 1)
        return s, np.where(s > -np.inf, np.take_along_axis(I, top, 1), -1)

    def search(self, q: np.ndarray, j: int, k: int,
               eligible: Callable[[np.ndarray, np.ndarray], np.ndarray], nprobe: int = 8,
               certify: bool = True, max_scan: float = 0.25, selector=None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Top-``j`` eligible rows for unit queries ``q`` (B, dim).

        ``k`` >= j rows are fetched per probe so that up to ``k - j`` ineligible ones can be
        skipped; ``eligible(rows, ids)`` says which ``ids`` (m, k) are allowed for queries
        ``rows`` (m,). ``selector``: optional FAISS IDSelector applied inside the scan.
        Returns ``(scores (B, j), ids (B, j), done (B,))``; rows with ``done`` False must be
        answered by an exact search.
        """
        q = np.ascontiguousarray(q, dtype=np.float32)
        cos, bound = self._bounds(q, self.sizes)
        p = min(nprobe, self.nlist)
        # round 1: the p lists with the nearest centroids (best recall for a fixed p)
        first = np.argpartition(-np.where(self.sizes > 0, cos, -np.inf), p - 1, axis=1)[:, :p]
        D, I = self._probe(q, first, cos, k, selector)
        s, ids = self._best(D, I, eligible(np.arange(len(q)), I), j)
        if not certify:
            return s, ids, s[:, -1] > -np.inf
        # round 2: every other list that might still hold a row above the J-th score
        need = bound >= s[:, -1:]  # (B, L)
        np.put_along_axis(need, first, False, axis=1)
        gave_up = need @ self.sizes > max_scan * max(len(self), 1)
        need[gave_up] = False
        todo = np.flatnonzero(need.any(1))
        if len(todo):
            D2, I2 = self._probe(q[todo], _padded_rows(need[todo]), cos[todo], k, selector)
            D2, I2 = np.concatenate([D[todo], D2], 1), np.concatenate([I[todo], I2], 1)
            s[todo], ids[todo] = self._best(D2, I2, eligible(todo, I2), j)
        return s, ids, ~gave_up & (s[:, -1] > -np.inf)


def _padded_rows(mask: np.ndarray) -> np.ndarray:
    """Column indices of the True entries of each row of ``mask`` (B, L), left-aligned and
    padded with -1 to the longest row: (B, max count)."""
    rows, cols = np.nonzero(mask)
    counts = mask.sum(1)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    out = np.full((len(mask), int(counts.max(initial=0))), -1, dtype=np.int64)
    out[rows, np.arange(len(rows)) - starts[rows]] = cols
    return out
