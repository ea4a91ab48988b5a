"""Run ``lopd`` and SIGKILL it at a chosen point (for tests/test_kill_resume.py).

``python tests/kill_driver.py POINT lopd-args...``; POINT is one of ``KILL_POINTS`` or
``none``. The kill is a real ``kill -9`` of this process, placed in the middle of a write where
there is one (half a file on disk, an open SQLite transaction, half a metrics line).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

KILL_POINTS = ("seeding", "phi0", "checkpoint-1", "checkpoint-2", "after-checkpoint-2",
               "mid-step-2", "metrics-2")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _half(path: Path) -> None:
    """Cut a freshly written file to half its size, as if the write had been interrupted."""
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2])


def _on_call(owner, name: str, call: int, before=None, after=None) -> None:
    """Wrap ``owner.name``: at its ``call``-th call run ``before(*args)`` (then the original
    and ``after(*args)``)."""
    original = getattr(owner, name)
    seen = [0]

    def wrapped(*args, **kwargs):
        seen[0] += 1
        if seen[0] == call and before is not None:
            before(*args)
        out = original(*args, **kwargs)
        if seen[0] == call and after is not None:
            after(*args)
        return out

    setattr(owner, name, wrapped)


def _install(point: str) -> None:
    import safetensors.torch
    import torch

    import lopd.checkpoint
    import lopd.trainer
    from lopd.experience.bank import ExperienceBank

    if point == "seeding":  # inside the transaction that inserts the seed rows
        def kill_inside(self, fn, *args):
            return original_transaction(self, lambda conn, *a: (fn(conn, *a), _die()), *args)

        original_transaction = ExperienceBank._transaction
        ExperienceBank._transaction = kill_inside
    elif point == "phi0":  # half of composer_phi0/composer.safetensors written
        def save_half(tensors, filename, *args, **kwargs):
            original_save(tensors, filename, *args, **kwargs)
            if "composer_phi0" in str(filename):
                _half(Path(filename))
                _die()

        original_save = safetensors.torch.save_file
        safetensors.torch.save_file = save_half
    elif point.startswith("checkpoint-"):  # half of optim.pt of the N-th checkpoint
        _on_call(torch, "save", 2 * int(point[-1]) - 1,
                 after=lambda obj, path, *a: (_half(Path(path)), _die()))
    elif point == "after-checkpoint-2":  # checkpoint 2 renamed into place, nothing after it
        _on_call(lopd.checkpoint, "replace_dir", 2, after=lambda *a: _die())
    elif point == "mid-step-2":  # step 2 rolled out and banked, killed before its update
        _on_call(lopd.trainer.Trainer, "update", 3, before=lambda *a: _die())
    elif point == "metrics-2":  # half of step 2's metrics line appended
        def torn(path, line):
            with open(path, "a") as handle:
                handle.write(line[: len(line) // 2])
            _die()

        _on_call(lopd.trainer, "append_line", 3, before=torn)
    elif point != "none":
        raise SystemExit(f"unknown kill point {point!r}")


if __name__ == "__main__":
    _install(sys.argv[1])
    from lopd.cli import main

    sys.exit(main(sys.argv[2:]))
