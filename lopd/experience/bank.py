"""Persistent experience bank: condensed successful trajectories in one SQLite file.

The paper's bank (method step 1) holds "the task description plus the action->result trace,
with verbose observations removed"; it grows during training and feeds the retriever. This
module is only the store: rows are ``Experience`` dataclasses, written by one trainer process
and read by any number of others (the retriever, `lopd bank ...`, evaluation).

Storage choices
- SQLite in WAL mode: readers never block the writer and see only committed transactions;
  ``busy_timeout`` absorbs short lock waits. ``synchronous=NORMAL`` is durable against a
  process crash (SIGKILL): a transaction whose COMMIT returned is in the WAL file. (A power
  cut may lose the last transactions but never corrupts the file.)
- Each ``add`` is one ``BEGIN IMMEDIATE ... COMMIT`` transaction: a batch is either fully
  stored (with its evictions) or not at all.
- Dedup: a unique index on ``(task_id, trace_sha256)`` -- the same trace for the same task is
  stored once (``INSERT OR IGNORE``); ``add`` returns only the ids it newly inserted.
- ``id`` is ``AUTOINCREMENT``: ids are never reused after eviction, so the vector index can key
  on them safely.
- Embeddings are float32 blobs of ``dim`` values (384 for all-MiniLM-L6-v2), NULL until the
  retriever embeds the row.
- Invalid rows are refused loudly, never dropped in silence: ``add`` raises a ``ValueError``
  naming the row and the field for a non-finite or non-numeric reward, a missing or empty
  task id or task text, a trace or domain that is not text, an unknown source, or an embedding of the wrong size or with
  NaN/inf values (``set_embeddings`` too). Nothing of such a batch is stored.
- Identities are stored exactly or refused: ``task_id`` and ``domain`` are compared for
  equality (self-exclusion in retrieval, ``rollback_to_step``, dedup, per-task eviction), so
  one that the bank would have to change -- text that is not valid Unicode, i.e. holds a lone
  surrogate such as ``"\ud800"`` (UTF-8 cannot encode it) -- raises the ``ValueError`` above;
  every other string (NUL, control and bidi characters, any length) reads back equal.
- Free text is repaired, not refused: in ``task_text`` and ``trace`` each lone surrogate is
  replaced by U+FFFD (``lopd.chat.safe_text``; nothing else changes). Dedup hashes the repaired
  trace, and the retriever embeds the repaired task text.

Eviction (only with ``capacity``): after an insert the bank drops rows until ``count() <=
capacity``. Victims are rollout rows first: repeatedly take the task with the most rollout
rows (ties: smallest task_id) and drop its oldest rollout row (smallest id). Only when no
rollout rows remain are seed rows dropped, by the same rule. This keeps coverage of many tasks
and the hand-given seeds as long as possible. Ids dropped by the last ``add`` are in
``last_evicted`` so an index can forget them.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import operator
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lopd.chat import safe_text

BANK_FILENAME = "bank.sqlite"
EMBED_DIM = 384
SOURCES = ("seed", "rollout")
IDENTITY_FIELDS = ("task_id", "domain")  # stored exactly or refused (module docstring)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS experiences (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id       TEXT    NOT NULL,
    domain        TEXT    NOT NULL,
    task_text     TEXT    NOT NULL,
    trace         TEXT    NOT NULL,
    trace_sha256  TEXT    NOT NULL,
    reward        REAL    NOT NULL,
    step_added    INTEGER NOT NULL,
    source        TEXT    NOT NULL CHECK (source IN ('seed', 'rollout')),
    embedding     BLOB,
    created_at    REAL    NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS ux_task_trace ON experiences(task_id, trace_sha256);
CREATE INDEX IF NOT EXISTS ix_step ON experiences(step_added);
CREATE INDEX IF NOT EXISTS ix_source_task ON experiences(source, task_id);
"""

_COLS = "id, task_id, domain, task_text, trace, reward, step_added, source, embedding, created_at"
_CHUNK = 900  # stay below SQLite's bound-parameter limit


@dataclass
class Experience:
    """One bank row. ``id``/``created_at`` are set by the bank; ``score`` is set by the
    retriever (cosine similarity to the query) and is not stored."""

    task_id: str
    domain: str
    task_text: str
    trace: str
    reward: float = 1.0
    step_added: int = 0
    source: str = "rollout"  # "seed" | "rollout"
    embedding: np.ndarray | None = field(default=None, repr=False)  # (dim,) float32 or None
    id: int | None = None
    created_at: float | None = None
    score: float | None = None

    @property
    def trace_sha256(self) -> str:
        return hashlib.sha256(safe_text(self.trace).encode("utf-8")).hexdigest()

    def to_json(self) -> dict[str, Any]:
        """JSON-able dict without the embedding (for export and reports)."""
        return {
            "id": self.id, "task_id": self.task_id, "domain": self.domain,
            "task_text": self.task_text, "trace": self.trace, "reward": self.reward,
            "step_added": self.step_added, "source": self.source,
            "created_at": self.created_at,
        }


def bank_path(run_dir: str | Path) -> Path:
    """Where a run keeps its bank: ``run_dir/bank.sqlite``."""
    return Path(run_dir) / BANK_FILENAME


def open_wal(path: Path, schema: str, busy_timeout_ms: int = 30_000) -> sqlite3.Connection:
    """An autocommit connection to ``path`` in WAL mode with ``schema`` applied.

    Two processes opening a new file at once can get ``database is locked`` from the switch to
    WAL (SQLite does not always call the busy handler there), so the switch and the schema are
    retried with a short backoff until ``busy_timeout_ms`` has passed.
    """
    conn = sqlite3.connect(str(path), timeout=busy_timeout_ms / 1000, isolation_level=None,
                           check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    deadline, wait = time.monotonic() + busy_timeout_ms / 1000, 0.01
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise RuntimeError(f"could not put {path} in WAL mode (got {mode!r})")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript("BEGIN IMMEDIATE;" + schema + "COMMIT;")
            return conn
        except sqlite3.OperationalError as err:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if "locked" not in str(err) or time.monotonic() > deadline:
                conn.close()
                raise
            time.sleep(wait)
            wait = min(2 * wait, 0.5)


class ExperienceBank:
    """SQLite-backed store of ``Experience`` rows (one writer, concurrent readers).

    ``path`` is the database file (created with its parent directory if missing).
    ``capacity``: maximum rows kept (None = unbounded); see the module docstring for the
    eviction policy. ``dim``: embedding length checked on write. One instance may be shared by
    threads (a lock serialises its connection); processes open their own instance.
    """

    def __init__(self, path: str | Path, capacity: int | None = None, dim: int = EMBED_DIM,
                 busy_timeout_ms: int = 30_000):
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be >= 1 or None, got {capacity}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.capacity = capacity
        self.dim = dim
        self.last_evicted: list[int] = []
        self._lock = threading.RLock()
        self._conn = open_wal(self.path, _SCHEMA, busy_timeout_ms)

    # -- plumbing ----------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _transaction(self, fn, *args):
        """Run ``fn(conn, *args)`` in one immediate (write-locked) transaction."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(self._conn, *args)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            return out

    def _blob(self, emb: np.ndarray | None, row: str = "row") -> bytes | None:
        """Float32 bytes of an embedding; ``ValueError`` (naming ``row``) if it has the wrong
        size or a non-finite value."""
        if emb is None:
            return None
        try:
            arr = np.ascontiguousarray(emb, dtype=np.float32).reshape(-1)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{row}: embedding is not an array of numbers ({err})") from None
        if arr.shape[0] != self.dim:
            raise ValueError(f"{row}: embedding has {arr.shape[0]} values, bank expects {self.dim}")
        if not np.isfinite(arr).all():
            bad = int((~np.isfinite(arr)).sum())
            raise ValueError(f"{row}: embedding has {bad} non-finite values (NaN or inf)")
        return arr.tobytes()

    def validate(self, experiences: Iterable[Experience]) -> None:
        """Raise the ``ValueError`` ``add`` would raise for this batch (nothing is written)."""
        now = time.time()
        for index, e in enumerate(experiences):
            self._validated(index, e, now)

    def _validated(self, index: int, e: Experience, now: float) -> tuple:
        """The SQL row of ``e``, or a ``ValueError`` naming the row and the bad field."""
        row = f"experience {index} (task_id={str(e.task_id)[:80]!r})"
        if e.source not in SOURCES:
            raise ValueError(f"{row}: source must be one of {SOURCES}, got {e.source!r}")
        for name in ("task_id", "domain", "task_text", "trace"):
            value = getattr(e, name)
            if not isinstance(value, str) or (name in ("task_id", "task_text") and not value.strip()):
                kind = "a non-empty string" if name in ("task_id", "task_text") else "a string"
                raise ValueError(f"{row}: {name} must be {kind}, got {value!r:.80}")
            if name in IDENTITY_FIELDS and safe_text(value) is not value:
                at = next(i for i, ch in enumerate(value) if "\ud800" <= ch <= "\udfff")
                raise ValueError(f"{row}: {name} is not valid Unicode (lone surrogate "
                                 f"{value[at]!r} at index {at}); an identity is stored exactly "
                                 "or refused, never rewritten")
        if isinstance(e.reward, bool) or not isinstance(e.reward, (int, float, np.number)):
            raise ValueError(f"{row}: reward must be a number, got {e.reward!r:.80}")  # noqa: TRY004
        try:
            reward = float(e.reward)
        except OverflowError:
            reward = math.inf
        if not math.isfinite(reward):
            raise ValueError(f"{row}: reward must be a finite number, got {e.reward!r:.80}")
        try:
            step = operator.index(e.step_added)
        except TypeError:
            raise ValueError(f"{row}: step_added must be an integer, got {e.step_added!r:.80}") from None
        trace = safe_text(e.trace)
        return (e.task_id, e.domain, safe_text(e.task_text), trace,
                hashlib.sha256(trace.encode("utf-8")).hexdigest(), reward, step,
                e.source, self._blob(e.embedding, row), now)

    def _row(self, r: Sequence[Any]) -> Experience:
        emb = None if r[8] is None else np.frombuffer(r[8], dtype=np.float32).copy()
        return Experience(id=r[0], task_id=r[1], domain=r[2], task_text=r[3], trace=r[4],
                          reward=r[5], step_added=r[6], source=r[7], embedding=emb,
                          created_at=r[9])

    # -- writes ------------------------------------------------------------------------------
    def add(self, experiences: Iterable[Experience]) -> list[int]:
        """Insert a batch atomically; returns the ids of rows newly inserted (duplicates of an
        existing ``(task_id, trace)`` are skipped, rows evicted by this add are left out).
        An invalid row raises ``ValueError`` before anything is written (module docstring)."""
        now = time.time()
        rows = [self._validated(i, e, now) for i, e in enumerate(experiences)]

        def insert(conn: sqlite3.Connection) -> tuple[list[int], list[int]]:
            # Drop duplicates before inserting: an ignored INSERT still burns an AUTOINCREMENT id.
            seen: set[tuple[str, str]] = set()
            tasks = list({r[0] for r in rows})
            for s in range(0, len(tasks), _CHUNK):
                part = tasks[s:s + _CHUNK]
                seen.update(conn.execute(
                    "SELECT task_id, trace_sha256 FROM experiences WHERE task_id IN"
                    f" ({','.join('?' * len(part))})", part).fetchall())
            ids = []
            for row in rows:
                if (row[0], row[4]) in seen:
                    continue
                seen.add((row[0], row[4]))
                cur = conn.execute(
                    "INSERT OR IGNORE INTO experiences (task_id, domain, task_text, trace,"
                    " trace_sha256, reward, step_added, source, embedding, created_at)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?)", row)
                if cur.rowcount == 1:
                    ids.append(int(cur.lastrowid))
            evicted = self._evict(conn) if self.capacity is not None else []
            return ids, evicted

        ids, evicted = self._transaction(insert)
        self.last_evicted = evicted
        gone = set(evicted)
        return [i for i in ids if i not in gone]

    def _evict(self, conn: sqlite3.Connection) -> list[int]:
        excess = conn.execute("SELECT COUNT(*) FROM experiences").fetchone()[0] - self.capacity
        evicted: list[int] = []
        for source in ("rollout", "seed"):
            if excess <= 0:
                break
            counts = conn.execute("SELECT task_id, COUNT(*) FROM experiences WHERE source=?"
                                  " GROUP BY task_id", (source,)).fetchall()
            heap = [(-c, t) for t, c in counts]
            heapq.heapify(heap)
            take: dict[str, int] = {}
            while excess > 0 and heap:
                neg, task = heapq.heappop(heap)
                take[task] = take.get(task, 0) + 1
                excess -= 1
                if neg + 1 < 0:
                    heapq.heappush(heap, (neg + 1, task))
            for task, n in take.items():
                victims = [r[0] for r in conn.execute(
                    "SELECT id FROM experiences WHERE source=? AND task_id=? ORDER BY id LIMIT ?",
                    (source, task, n))]
                conn.executemany("DELETE FROM experiences WHERE id=?", [(i,) for i in victims])
                evicted.extend(victims)
        return sorted(evicted)

    def set_embeddings(self, ids: Sequence[int], embeddings: np.ndarray) -> None:
        """Store ``embeddings`` (N, dim) float32 for rows ``ids`` in one transaction."""
        if len(ids) != len(embeddings):
            raise ValueError(f"{len(ids)} ids but {len(embeddings)} embeddings")
        pairs = [(self._blob(e, f"row id {int(i)}"), int(i)) for i, e in zip(ids, embeddings)]
        self._transaction(
            lambda c: c.executemany("UPDATE experiences SET embedding=? WHERE id=?", pairs))

    def rollback_to_step(self, step: int) -> int:
        """Delete rows added after training step ``step`` (for an exact resume from a
        checkpoint taken at that step). Returns the number of rows deleted."""
        return self._transaction(lambda c: c.execute(
            "DELETE FROM experiences WHERE step_added > ?", (int(step),)).rowcount)

    # -- reads -------------------------------------------------------------------------------
    def get(self, ids: Sequence[int], with_embeddings: bool = True) -> list[Experience]:
        """Rows for ``ids``, in the order asked; ids not in the bank (evicted) are skipped."""
        ids = [int(i) for i in ids]
        found: dict[int, Experience] = {}
        cols = _COLS if with_embeddings else _COLS.replace("embedding", "NULL")
        with self._lock:
            for s in range(0, len(ids), _CHUNK):
                part = ids[s:s + _CHUNK]
                q = f"SELECT {cols} FROM experiences WHERE id IN ({','.join('?' * len(part))})"
                for r in self._conn.execute(q, part):
                    found[r[0]] = self._row(r)
        return [found[i] for i in ids if i in found]

    def all(self, max_step: int | None = None, with_embeddings: bool = True) -> list[Experience]:
        """Every row (ordered by id), optionally only those with ``step_added <= max_step``."""
        cols = _COLS if with_embeddings else _COLS.replace("embedding", "NULL")
        q, args = f"SELECT {cols} FROM experiences", ()
        if max_step is not None:
            q, args = q + " WHERE step_added <= ?", (int(max_step),)
        with self._lock:
            return [self._row(r) for r in self._conn.execute(q + " ORDER BY id", args)]

    def count(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM experiences").fetchone()[0]

    def ids(self, embedded_only: bool = False) -> np.ndarray:
        """All row ids (int64, ascending); with ``embedded_only`` those that have embeddings."""
        q = "SELECT id FROM experiences"
        if embedded_only:
            q += " WHERE embedding IS NOT NULL"
        with self._lock:
            return np.array([r[0] for r in self._conn.execute(q + " ORDER BY id")],
                            dtype=np.int64)

    def embedded_rows(self, ids: Sequence[int] | None = None
                      ) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
        """``(ids (N,), task_ids, steps (N,), embeddings (N, dim))`` of embedded rows (all, or
        only ``ids``), ordered by id: what the retriever needs to rebuild its index."""
        base = ("SELECT id, task_id, step_added, embedding FROM experiences"
                " WHERE embedding IS NOT NULL")
        rows: list[Sequence[Any]] = []
        with self._lock:
            if ids is None:
                rows = self._conn.execute(base + " ORDER BY id").fetchall()
            else:
                ids = [int(i) for i in ids]
                for s in range(0, len(ids), _CHUNK):
                    part = ids[s:s + _CHUNK]
                    rows += self._conn.execute(
                        base + f" AND id IN ({','.join('?' * len(part))})", part).fetchall()
                rows.sort(key=lambda r: r[0])
        out_ids = np.array([r[0] for r in rows], dtype=np.int64)
        steps = np.array([r[2] for r in rows], dtype=np.int64)
        emb = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32)
        return out_ids, [r[1] for r in rows], steps, emb.reshape(len(rows), self.dim).copy()

    def missing_embeddings(self) -> list[Experience]:
        """Rows stored without an embedding (e.g. seeds added before a retriever existed)."""
        with self._lock:
            q = f"SELECT {_COLS} FROM experiences WHERE embedding IS NULL ORDER BY id"
            return [self._row(r) for r in self._conn.execute(q)]

    def stats(self) -> dict[str, Any]:
        """Summary: rows, tasks, embedded rows, per-domain and per-source counts, mean reward,
        step range, capacity and file size."""
        with self._lock:
            c = self._conn
            rows, tasks, embedded, mean_r, lo, hi = c.execute(
                "SELECT COUNT(*), COUNT(DISTINCT task_id), COUNT(embedding), AVG(reward),"
                " MIN(step_added), MAX(step_added) FROM experiences").fetchone()
            per_domain = dict(c.execute("SELECT domain, COUNT(*) FROM experiences"
                                        " GROUP BY domain ORDER BY COUNT(*) DESC").fetchall())
            per_source = dict(c.execute("SELECT source, COUNT(*) FROM experiences"
                                        " GROUP BY source ORDER BY source").fetchall())
        size = sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*"))
        return {"path": str(self.path), "rows": rows, "tasks": tasks, "embedded": embedded,
                "per_domain": per_domain, "per_source": per_source,
                "mean_reward": mean_r, "step_min": lo, "step_max": hi,
                "capacity": self.capacity, "file_bytes": size}
