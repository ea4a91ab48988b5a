"""Full chat transcripts beside the experience bank, for ``method.encoder_input=full``.

The bank keeps what the paper retrieves: the task text and a condensed action->result trace.
The authors' composer instead encodes the whole chat rendering of a stored trajectory (system
prompt with tool schemas, every turn). This store keeps the transcript of every row that enters
a LOPD run's bank, keyed like the bank's dedup key ``(task_id, trace_sha256)``, in its own table
of the same SQLite file (WAL: one writer, concurrent readers), so the bank's own schema and
rollback logic stay as they are. A row without a transcript (an older bank) falls back to its
condensed trace.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from lopd.experience.bank import open_wal
from lopd.types import Message

_SCHEMA = """
CREATE TABLE IF NOT EXISTS transcripts (
    task_id      TEXT NOT NULL,
    trace_sha256 TEXT NOT NULL,
    messages     TEXT NOT NULL,
    PRIMARY KEY (task_id, trace_sha256)
);
"""


class TranscriptStore:
    """``(task_id, trace_sha256) -> messages`` in ``path`` (the bank's SQLite file)."""

    def __init__(self, path: str | Path, busy_timeout_ms: int = 30_000):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = open_wal(self.path, _SCHEMA, busy_timeout_ms)

    def put(self, rows: Iterable[tuple[str, str, Sequence[Message]]]) -> None:
        """Store ``(task_id, trace_sha256, messages)`` rows in one transaction (first wins)."""
        values = [(task_id, sha, json.dumps(list(messages), ensure_ascii=False))
                  for task_id, sha, messages in rows]
        if not values:
            return
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(
                    "INSERT OR IGNORE INTO transcripts (task_id, trace_sha256, messages)"
                    " VALUES (?,?,?)", values)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def get(self, task_id: str, trace_sha256: str) -> list[Message] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT messages FROM transcripts WHERE task_id = ? AND trace_sha256 = ?",
                (task_id, trace_sha256)).fetchone()
        return None if row is None else json.loads(row[0])

    def count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM transcripts").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def render_transcript(tokenizer, messages: Sequence[Message]) -> str:
    """The chat rendering of a transcript as text (the tokenizer's template; a plain
    ``role: content`` listing if it has none)."""
    clean = [{"role": m.get("role", "user"), "content": str(m.get("content") or "")}
             for m in messages]
    try:
        return tokenizer.apply_chat_template(clean, tokenize=False)
    except (ValueError, AttributeError, TypeError):
        return "\n".join(f"{m['role']}: {m['content']}" for m in clean)
