"""Experience bank (SQLite store of condensed successful trajectories) and dense retriever.

Light on purpose: names are imported lazily, so ``import lopd.experience`` pulls in neither
numpy-heavy code nor torch/faiss/sentence-transformers until a name is used.

- ``bank``: ``Experience``, ``ExperienceBank`` (persistent, WAL, dedup, eviction).
- ``condense``: ``condense_trajectory``, ``condense_code``, ``experience_from_trajectory``.
- ``retriever``: ``Embedder`` (all-MiniLM-L6-v2), ``HashingEmbedder``, ``Retriever``.
- ``ann``: ``CertifiedIVF``, the provably exact IVF index the retriever uses for large banks.
- ``cli``: ``bank_stats``, ``bank_query``, ``bank_export`` for ``lopd bank ...``.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Experience": "bank", "ExperienceBank": "bank", "bank_path": "bank",
    "condense_trajectory": "condense", "condense_code": "condense",
    "experience_from_trajectory": "condense",
    "Embedder": "retriever", "HashingEmbedder": "retriever", "Retriever": "retriever",
    "bank_stats": "cli", "bank_query": "cli", "bank_export": "cli",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"lopd.experience.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'lopd.experience' has no attribute {name!r}")
