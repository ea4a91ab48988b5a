"""Run ``lopd`` and SIGKILL it at a chosen point (for tests/test_kill_resume.py).

``python tests/kill_driver.py POINT lopd-args...``; POINT is one of ``KILL_POINTS`` or
``none``. The kill is a real ``kill -9`` of this process, placed in the middle of a write where
there is one (half a file on disk, an open SQLite transaction, half a metrics line).

``python tests/kill_driver.py --serve`` is the same, run many times at a lower price: it
imports what every run imports (torch, transformers, peft, the trainer: most of a run's time)
once, then forks one child per request read from stdin (``ForkServer`` is the client). Each
child is a run of its own process, as above: it installs its kill point after the fork, writes
its stdout/stderr to the files named, and exits through the interpreter as a plain run does
(its exit status, or ``-9`` when killed, is the answer).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
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


PRELOAD = ("torch", "safetensors.torch", "transformers", "peft", "lopd.cli", "lopd.trainer",
           "lopd.checkpoint", "lopd.experience.bank", "lopd.runtime_build", "lopd.models")


def _serve() -> tuple[str, list[str]]:
    """Import ``PRELOAD``, then fork a child per request line; returns (point, lopd args) in
    a child only. The patches of ``_install`` are made after the fork and reach the same
    attributes as in a plain run (module attributes, or names imported when called)."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401 (lazy modules)

    while line := sys.stdin.readline():
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                                    (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                    (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
                opened = os.open(path, flags, 0o644)
                os.dup2(opened, fd)
                os.close(opened)
            sys.stdin = open(os.devnull)  # noqa: SIM115 (the child's stdin until it exits)
            sys.argv = [sys.argv[0], request["point"], *request["args"]]
            return request["point"], request["args"]
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
    sys.exit(0)


class ForkServer:
    """Client of ``kill_driver.py --serve``: ``run(point, args, timeout)`` is
    ``subprocess.run([python, kill_driver.py, point, *args])``, at the cost of a fork."""

    def __init__(self, env: dict):
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.count = 0

    def run(self, point: str, args: list[str], folder: Path,
            timeout: float) -> subprocess.CompletedProcess:
        self.count += 1
        out, err = (folder / f"kill-driver-{self.count}.{n}" for n in ("out", "err"))
        request = {"point": point, "args": args, "stdout": str(out), "stderr": str(err)}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            self.close()
            raise subprocess.TimeoutExpired([point, *args], timeout)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"kill_driver.py --serve exited ({self.proc.wait()})")
        reply = json.loads(line)
        return subprocess.CompletedProcess([point, *args], reply["returncode"],
                                           out.read_text(), err.read_text())

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        POINT, ARGS = _serve()
    else:
        POINT, ARGS = sys.argv[1], sys.argv[2:]
    _install(POINT)
    from lopd.cli import main

    sys.exit(main(ARGS))
