"""Atomic checkpoints with keep-last-N (export of the deployable student: ``lopd.policy``).

A checkpoint is a directory ``RUN/checkpoints/step-NNNNNN`` holding one entry per part
(``student/`` as a PEFT adapter or full HF directory, ``composer/``, ``optim.pt``,
``state.json``, ``rng.pt``, ``config.yaml``). Under ``dist.strategy=fsdp`` ``student/`` and
``student_optim/`` hold every process's shards instead (``torch.distributed.checkpoint``,
``lopd.fsdp``); export turns them back into a plain HF model directory. A checkpoint is
written under a temporary name, every file is flushed to disk, and it is renamed into place
only when complete (``lopd.atomic``), so a run killed mid-write never leaves a checkpoint that
looks valid. Its ``COMPLETE`` marker lists
every file with its size: a checkpoint damaged later (a file missing or truncated) is
recognised (``checkpoint_problem``) and skipped, and resume picks the newest intact one. The
experience bank is already persistent (SQLite) and is not copied.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lopd import distributed
from lopd.atomic import remove_temporaries, replace_dir

_PREFIX = "step-"
_DONE = "COMPLETE"


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def _manifest(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` (relative path -> size in bytes)."""
    return {str(p.relative_to(folder)): p.stat().st_size
            for p in sorted(folder.rglob("*")) if p.is_file()}


def save_checkpoint(run_dir: str | Path, step: int, parts: dict[str, Callable[[Path], None]],
                    keep: int = 2, shared: Sequence[Callable[[Path], None]] = ()) -> Path:
    """Write every part (``writer(path)``) into a new checkpoint atomically; prune old ones.

    Without ``shared`` the main process alone calls this. With ``shared`` (writers that every
    process runs on the checkpoint directory: sharded weights, ``lopd.fsdp``) all processes
    call it; the main process makes the directory, writes ``parts`` and the marker after the
    shared writers returned, and renames it into place."""
    main = distributed.is_main()
    root = checkpoint_dir(run_dir)
    final = root / f"{_PREFIX}{step:06d}"
    tmp = root / f".tmp-{final.name}"
    if main:
        root.mkdir(parents=True, exist_ok=True)
        remove_temporaries(root)  # leftovers of a write that was killed
        tmp.mkdir()
    if shared:
        distributed.barrier()
    try:
        for writer in shared:
            writer(tmp)
        if main:
            for name, writer in parts.items():
                writer(tmp / name)
            (tmp / _DONE).write_text(json.dumps({"files": _manifest(tmp)}) + "\n")
    except BaseException:
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    if main:
        replace_dir(final, tmp)
        for old in list_checkpoints(run_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def checkpoint_problem(path: str | Path) -> str | None:
    """Why the checkpoint at ``path`` cannot be used (None: it is complete and intact)."""
    path = Path(path)
    try:
        marker = (path / _DONE).read_text()
    except OSError:
        return "incomplete (no COMPLETE marker)"
    if marker.strip() == "ok":  # written before the marker listed its files
        return None
    try:
        files = json.loads(marker)["files"]
    except (ValueError, KeyError, TypeError):
        return "damaged COMPLETE marker"
    for name, size in files.items():
        entry = path / name
        if not entry.is_file():
            return f"{name} is missing"
        if entry.stat().st_size != size:
            return f"{name} has {entry.stat().st_size} bytes, {size} were written"
    return None


def _step_of(path: Path) -> int | None:
    suffix = path.name[len(_PREFIX):]
    return int(suffix) if path.name.startswith(_PREFIX) and suffix.isdigit() else None


def all_checkpoints(run_dir: str | Path) -> list[Path]:
    """Every ``step-N`` directory, intact or not, oldest first."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _step_of(p) is not None]
    return sorted(found, key=_step_of)


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete, intact checkpoints, oldest first."""
    return [p for p in all_checkpoints(run_dir) if checkpoint_problem(p) is None]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
