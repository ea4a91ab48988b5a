"""Crash-safe writes for every file of a run directory.

A file or directory is written under a temporary name in the same folder, flushed to disk
(``fsync``), then renamed into place, and the folder itself is synced so the rename survives a
power loss. A process killed at any instant therefore leaves either the old version or the new
one, never a half-written file under the final name; stale temporaries (names starting with
``.tmp-``) are ignored by readers and removed by ``remove_temporaries``.

Appends (``append_line``) write one whole line with a single ``write`` and ``fsync``; a reader
of an append-only log drops a torn last line (``read_complete_lines``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

TMP_PREFIX = ".tmp-"


def _fsync_path(path: Path) -> None:
    """Flush a file or a directory entry to disk (directories: where the OS allows it)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) if path.is_dir() else os.O_RDONLY
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file under ``root`` and every directory, deepest first."""
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            _fsync_path(Path(folder) / name)
        _fsync_path(Path(folder))


def _temporary(final: Path) -> Path:
    return final.with_name(f"{TMP_PREFIX}{final.name}.{os.getpid()}")


def write_with(path: str | Path, writer: Callable[[Path], None]) -> Path:
    """Atomically create ``path`` (a file) with ``writer(temporary_path)``."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(final)
    try:
        writer(tmp)
        _fsync_path(tmp)
        os.replace(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    _fsync_path(final.parent)
    return final


def write_text(path: str | Path, text: str) -> Path:
    """Atomically replace ``path`` with ``text`` (UTF-8)."""
    return write_with(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def replace_dir(final: str | Path, staged: str | Path) -> Path:
    """Move the complete directory ``staged`` to ``final``, replacing what is there. A kill
    between the two renames leaves the old copy under a ``.tmp-`` name and no ``final``."""
    final, staged = Path(final), Path(staged)
    fsync_tree(staged)
    old = None
    if final.exists():
        old = final.with_name(f"{TMP_PREFIX}old-{final.name}.{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(staged, final)
    _fsync_path(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


@contextlib.contextmanager
def staged_dir(final: str | Path) -> Iterator[Path]:
    """``with staged_dir(d) as tmp:`` fill ``tmp``; on success it becomes ``d`` atomically, on
    an exception it is removed and ``d`` is left as it was."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(final)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(final, tmp)


def append_line(path: str | Path, line: str) -> None:
    """Append ``line`` plus a newline with one ``write`` and an ``fsync``."""
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        if written != len(data):  # a short write: finish it rather than leave a torn line
            os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)


def read_complete_lines(path: str | Path) -> list[str]:
    """The newline-terminated lines of ``path`` (a torn last line is dropped)."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    return [line for line in lines[:-1] if line]


def remove_temporaries(folder: str | Path) -> int:
    """Delete leftovers of interrupted writes (``.tmp-*``) directly under ``folder``."""
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    removed = 0
    for entry in folder.iterdir():
        if entry.name.startswith(TMP_PREFIX):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed += 1
    return removed


class DamagedRunFile(ValueError):
    """A file of a run directory is missing, truncated or unreadable; the message names it."""
