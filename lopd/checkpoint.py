"""Atomic checkpoints with keep-last-N, and export of the deployable student.

A checkpoint is a directory ``RUN/checkpoints/step-NNNNNN`` holding one entry per part
(``student/`` as a PEFT adapter or full HF directory, ``composer.pt``, ``optim.pt``,
``state.json``, ``rng.pt``, ``config.yaml``). It is written under a temporary name and renamed
into place only when complete, so a run killed mid-write never leaves a checkpoint that looks
valid; resume picks the newest complete one. The experience bank is already persistent
(SQLite) and is not copied.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

_PREFIX = "step-"
_DONE = "COMPLETE"


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def save_checkpoint(run_dir: str | Path, step: int, parts: dict[str, Callable[[Path], None]],
                    keep: int = 2) -> Path:
    """Write every part (``writer(path)``) into a new checkpoint atomically; prune old ones."""
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{_PREFIX}{step:06d}"
    tmp = root / f".tmp-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name, writer in parts.items():
        writer(tmp / name)
    (tmp / _DONE).write_text("ok\n")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.startswith(_PREFIX) and (p / _DONE).is_file()]
    return sorted(found, key=lambda p: int(p.name[len(_PREFIX):]))


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


def export_student(run_dir: str | Path, out: str | Path, merge: bool = False) -> Path:
    """Copy the newest checkpoint's student to ``out`` (an HF or PEFT directory).

    With ``merge``, a LoRA student is merged into its base -- warm start (``model.init_adapter``)
    included, merged first as in training -- and saved as a full HF model that
    ``AutoModelForCausalLM.from_pretrained(out)`` loads without lopd. Without ``merge`` a LoRA
    student is written as its PEFT adapter; when the run had a warm start, that adapter is a
    delta on the *warm-started* base, which ``OUT/lopd_base.json`` names.
    """
    import json

    from lopd.policy import load_run_policy, run_config, run_student_dir

    student, out = run_student_dir(run_dir), Path(out)
    is_adapter = (student / "adapter_config.json").is_file()
    shutil.rmtree(out, ignore_errors=True)
    if is_adapter and merge:
        merged, tokenizer = load_run_policy(run_dir, dtype="fp32", device="cpu")
        merged.save_pretrained(out)
        tokenizer.save_pretrained(out)
        return out
    shutil.copytree(student, out)
    init_adapter = run_config(run_dir)["model"].get("init_adapter", "")
    if is_adapter and init_adapter:
        base = {"model": run_config(run_dir)["model"]["name"], "init_adapter": init_adapter,
                "note": "this adapter applies on top of model + init_adapter merged; "
                        "`lopd export --merge` writes the complete model"}
        (out / "lopd_base.json").write_text(json.dumps(base, indent=2) + "\n")
    return out
