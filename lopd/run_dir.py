"""The life of a run directory: checks before a start, recovery of damaged parts, fresh starts.

A run directory holds ``config.yaml``, ``metrics.jsonl``, ``checkpoints/``, the bank
(``bank.sqlite``), and for LOPD ``composer_phi0/`` and ``coldstart.json``. Every one of them is
written atomically (``lopd.atomic``), so a kill leaves old or new versions only; what can still
go wrong (a disk error, a file truncated by hand, a directory from an older lopd) is detected
here and repaired with a one-line notice on stderr:

- ``composer_phi0/`` unreadable: removed, and the cold start builds it again;
- a checkpoint damaged: skipped, the run resumes from the one before (``Runtime.restore``);
- leftovers of interrupted writes (``.tmp-*``): removed.

A start without ``--resume`` in a directory that already holds a run starts over: its
checkpoints, metrics and the bank's rollout rows go (the seed rows and ``phi_0`` stay: they
depend only on the config), so the new run repeats a run started in an empty directory.
"""

from __future__ import annotations

import json
import pickle
import shutil
import sqlite3
import sys
from pathlib import Path

from lopd.atomic import DamagedRunFile, read_complete_lines, remove_temporaries, write_text

PHI0 = "composer_phi0"


def notice(message: str) -> None:
    """One line on stderr about something lopd noticed and handled."""
    print(f"lopd: {message}", file=sys.stderr, flush=True)


def unreadable_errors() -> tuple[type[BaseException], ...]:
    """What reading a damaged run file raises (torch, safetensors, JSON, pickle, the OS)."""
    from safetensors import SafetensorError

    return (DamagedRunFile, SafetensorError, OSError, ValueError, RuntimeError, KeyError,
            EOFError, pickle.UnpicklingError)


def one_line(error: BaseException) -> str:
    """An exception's message on one line (its type when it has none)."""
    text = " ".join(str(error).split())
    return text or type(error).__name__


def output_dir_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be a run/output directory (a file there or above it), else None."""
    path = Path(path).expanduser()
    for folder in (path, *path.parents):
        if folder.exists():
            if not folder.is_dir():
                which = "is" if folder == path else f"is under {folder}, which is"
                return f"{path} {which} a file, not a directory"
            return None
    return None


def phi0_problem(phi0: Path) -> str | None:
    """Why ``composer_phi0/`` cannot be loaded (None: present and readable, or absent)."""
    if not phi0.exists():
        return None
    weights = phi0 / "composer.safetensors"
    if not weights.is_file():
        return "composer.safetensors is missing"
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(weights), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 -- reading every tensor finds a truncation
                handle.get_tensor(key)
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        return f"composer.safetensors is unreadable ({one_line(error)})"
    if not (phi0 / "composer.json").is_file():
        return "composer.json is missing"
    return None


def repair(out: Path) -> None:
    """Remove leftovers of interrupted writes and a damaged ``composer_phi0/`` (rebuilt by the
    cold start), each with a notice."""
    for folder in (out, out / "checkpoints"):
        if remove_temporaries(folder):
            notice(f"removed unfinished writes in {folder}")
    phi0 = out / PHI0
    problem = phi0_problem(phi0)
    if problem is not None:
        notice(f"{phi0} is damaged ({problem}): the cold start will build it again")
        shutil.rmtree(phi0, ignore_errors=True)


def start_over(out: Path) -> None:
    """Before a fresh start in a directory that held a run: drop its checkpoints, metrics and
    the bank's rollout rows, so the run repeats one started in an empty directory."""
    from lopd.experience.bank import bank_path

    removed = []
    checkpoints = out / "checkpoints"
    if checkpoints.exists():
        shutil.rmtree(checkpoints)
        removed.append("checkpoints")
    metrics = out / "metrics.jsonl"
    if metrics.exists():
        metrics.unlink()
        removed.append("metrics")
    for bank, what in ((bank_path(out), "rollout rows of the bank"), (out / "skills.sqlite", "skills")):
        if bank.exists() and _drop_rollout_rows(bank):
            removed.append(what)
    if removed:
        notice(f"starting {out} over (no --resume): removed its {', '.join(removed)}")


def _drop_rollout_rows(path: Path) -> int:
    """Delete the rows rollouts added (seed rows stay); returns how many went."""
    with sqlite3.connect(str(path), timeout=30) as conn:
        try:
            return conn.execute("DELETE FROM experiences WHERE source = 'rollout'").rowcount
        except sqlite3.OperationalError:  # no table yet
            return 0


def trim_metrics(path: Path, step: int) -> None:
    """Keep the metrics logged up to the checkpoint at ``step``: training rows of earlier steps
    and evaluations up to it (a torn last line of a killed append is dropped)."""
    if not path.exists():
        return
    kept = []
    for line in read_complete_lines(path):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        is_eval = any(str(key).startswith("eval/") for key in row)
        if row.get("step", step + 1) < step or (is_eval and row["step"] <= step):
            kept.append(line)
    write_text(path, "".join(line + "\n" for line in kept))
