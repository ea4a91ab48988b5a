"""Back ends of ``lopd bank stats|query|export``: inspect a run's experience bank.

Each function takes a run directory (holding ``bank.sqlite``) or the database file itself,
and returns plain text (rich tables rendered without colour) so the CLI can print it and tests
can read it. ``bank_query`` loads the real MiniLM embedder unless one is passed.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from lopd.experience.bank import ExperienceBank, bank_path


def _open(run_dir: str | Path) -> ExperienceBank:
    p = Path(run_dir)
    path = p if p.suffix == ".sqlite" else bank_path(p)
    if not path.exists():
        raise FileNotFoundError(f"no experience bank at {path}")
    return ExperienceBank(path)


def _render(*renderables, width: int = 120) -> str:
    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    for r in renderables:
        console.print(r)
    return console.file.getvalue()


def bank_stats(run_dir: str | Path) -> str:
    """Rows, tasks, embedded rows, reward and step range, and per-domain/per-source counts."""
    from rich.table import Table

    with _open(run_dir) as bank:
        st = bank.stats()
    summary = Table(title="Experience bank", show_header=False)
    summary.add_column("key")
    summary.add_column("value", justify="right")
    mean = "-" if st["mean_reward"] is None else f"{st['mean_reward']:.3f}"
    steps = "-" if st["step_min"] is None else f"{st['step_min']} .. {st['step_max']}"
    for k, v in [("path", st["path"]), ("rows", st["rows"]), ("tasks", st["tasks"]), ("embedded", st["embedded"]),
                 ("mean reward", mean), ("steps", steps),
                 ("capacity", st["capacity"] or "unbounded"),
                 ("file size", f"{st['file_bytes'] / 1e6:.1f} MB")]:
        summary.add_row(k, str(v))
    parts = [summary]
    for key, title in (("per_domain", "domain"), ("per_source", "source")):
        t = Table(title=f"rows per {title}")
        t.add_column(title)
        t.add_column("rows", justify="right")
        t.add_column("share", justify="right")
        for name, n in st[key].items():
            t.add_row(name, str(n), f"{n / max(st['rows'], 1):.1%}")
        parts.append(t)
    return _render(*parts)


def bank_query(run_dir: str | Path, text: str, j: int = 3, embedder=None,
               max_trace_chars: int = 400) -> str:
    """The ``j`` experiences most similar to ``text`` (no same-task exclusion), as a table."""
    from rich.table import Table

    from lopd.experience.retriever import Embedder, Retriever

    with _open(run_dir) as bank:
        retriever = Retriever(bank, embedder or Embedder())
        hits = retriever.retrieve([(None, text)], j=j, exclude_same_task=False)[0]
    t = Table(title=f"top-{j} for: {text}", show_lines=True)
    for col in ("id", "score", "task", "domain", "step", "reward", "trace"):
        t.add_column(col, overflow="fold")
    for e in hits:
        trace = e.trace if len(e.trace) <= max_trace_chars else e.trace[:max_trace_chars] + "…"
        t.add_row(str(e.id), f"{e.score:.3f}", e.task_id, e.domain, str(e.step_added),
                  f"{e.reward:.2f}", trace)
    return _render(t)


def bank_export(run_dir: str | Path, out_path: str | Path) -> int:
    """Write every row (ordered by id, without embeddings) as JSON lines; returns the count."""
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with _open(run_dir) as bank, out.open("w", encoding="utf-8") as f:
        rows = bank.all(with_embeddings=False)
        for e in rows:
            f.write(json.dumps(e.to_json(), ensure_ascii=False) + "\n")
    return len(rows)
