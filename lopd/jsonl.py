"""Read JSON-lines files with errors that point at the line (task files, bank files)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path


def json_lines(path: str | Path, error: type[Exception] = ValueError,
               shown: str | None = None) -> Iterator[tuple[str, int, object]]:
    """``(where, line number, parsed value)`` for every non-blank line of ``path``; a line that
    is not JSON raises ``error("FILE:LINE: not valid JSON (...)")``. ``shown`` names the file in
    messages (default: ``path``)."""
    name = shown if shown is not None else str(path)
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{name}:{number}"
            try:
                yield where, number, json.loads(line)
            except json.JSONDecodeError as problem:
                raise error(f"{where}: not valid JSON ({problem.msg})") from None
