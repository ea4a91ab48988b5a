"""Run untrusted Python (model-written code) in a contained child process.

``call_sandboxed(code, entry_point, calls)`` runs the code, calls its entry point on each input
and returns what it returned, as plain data (``lopd.envs.plaindata``): this is what scoring
uses. The values are only claims (the candidate shares the reporting process and can write
anything there); the caller compares them, outside the sandbox, with expected values the
sandbox never saw, so a forged report is just a wrong answer. ``run_sandboxed(code, tests)``
runs assert snippets in the candidate's namespace; its pass/fail comes from inside the
sandbox, so it serves containment checks, never rewards.

The child is ``python -I -B -c <plaindata.py + _confine.py + _harness.py>`` in its own session,
with a scrubbed environment (PATH, HOME, LANG) and fresh temporary directories. It confines
itself before reading the candidate code (layers in ``_confine.py``; the ones that took effect
are in ``SandboxResult.isolation``). After the run the parent kills the process group, every
process of the private uid (as root, until none is left running) and the cgroup (where one was
made), then deletes the directories (``remove_tree``: iterative, never raises). Results come
back on a private file as ``<nonce> <json>`` lines; the parser reads at most a few MB and never
raises.

The interpreter is chosen by a one-off probe: the first of the system ``python3`` (preferred:
it starts faster and brings no installed packages, such as the HumanEval data, into view) and
``sys.executable`` that can run the harness under the uid switch; if none can, the uid layer is
skipped.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lopd.envs.cleanup import live_processes, make_cgroup, remove_cgroup, remove_tree
from lopd.envs.plaindata import decode, loads_json

_HERE = Path(__file__).parent
_CHILD_SOURCE = "\n".join((_HERE / name).read_text()
                          for name in ("plaindata.py", "_confine.py", "_harness.py"))
_TAIL = 2000
_SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
_probe_lock = threading.Lock()
_probe_result: tuple[str, bool] | None = None
DEFAULT_LIMITS = {"timeout_s": 5.0, "memory_mb": 512, "cpu_s": 5, "max_file_mb": 8,
                  "max_procs": 16, "max_files": 1000, "max_disk_mb": 64,
                  "per_test_timeout_s": 5.0}


@dataclass
class SandboxResult:
    """Outcome of one run: ``results[i]`` is test ``i``'s pass (tests mode) or whether call
    ``i`` returned plain data (calls mode, with the value in ``values[i]``)."""

    passed: int
    failed: int
    results: list[bool]
    timed_out: bool
    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    load_error: str = ""
    errors: list[str] = field(default_factory=list)
    isolation: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    pid: int = 0  # the harness's pid = its process group id (killed after the run)
    uid: int | None = None  # the private uid the code ran as (None: not switched)
    values: list[Any] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.passed + self.failed

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid``: a process that switches to it calls kill(-1), twice.

    Where util-linux ``setpriv`` is installed the switch is ``setpriv ... kill -9 -1``, which
    ``subprocess`` starts with vfork: a fork of this process would copy its page tables, slow
    when it holds a model (several GB: ~0.3 s a run instead of a few ms)."""
    setpriv = shutil.which("setpriv", path=_SYSTEM_PATH)
    kill = shutil.which("kill", path=_SYSTEM_PATH)
    for _ in range(2):
        if setpriv and kill:
            subprocess.run([setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                            kill, "-9", "-1"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                           env={"PATH": _SYSTEM_PATH})
            continue
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            try:
                os.setgid(uid)
                os.setuid(uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)


def _kill_all(proc: subprocess.Popen, uid: int | None, cgroup: str | None,
              timeout_s: float = 5.0) -> None:
    """Kill the process group, the private uid's processes and the cgroup, then wait (bounded)
    until none of them is left running: a SIGKILLed process exits only once it is scheduled,
    and a fork in flight can outlive one sweep, so the kills repeat while anything is left."""
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while True:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if uid is not None:
            _kill_uid(uid)
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:  # pragma: no cover - should not happen after SIGKILL
            pass
        if not live_processes(proc.pid, uid) or time.monotonic() > deadline:
            break
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    remove_cgroup(cgroup)


def wait_exit(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait for ``proc`` to exit (woken by a pidfd where there is one, rather than polling);
    False on timeout."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None:
        try:
            select.select([pidfd], [], [], timeout_s)
        finally:
            os.close(pidfd)
    try:
        proc.wait(timeout=0 if pidfd is not None else timeout_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def _read_head(path: Path, limit: int) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - _TAIL))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _records(lines: str, nonce: str):
    """The JSON objects on lines that carry the nonce; anything unreadable is skipped."""
    for line in lines.splitlines():
        if line.startswith(nonce + " "):
            try:
                record = loads_json(line[len(nonce) + 1:])
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record


def _index(record: dict, key: str, size: int) -> int | None:
    value = record.get(key)
    return value if type(value) is int and 0 <= value < size else None


def _parse(lines: str, nonce: str, size: int, mode: str):
    """(ok[i], values[i], errors[i], load_error, isolation): the first word on each index wins."""
    ok, values, errors = [False] * size, [None] * size, [""] * size
    seen, load_error, isolation, done = set(), "", None, False
    for record in _records(lines, nonce):
        key = "call" if mode == "calls" else "test"
        index = _index(record, key, size)
        if isolation is None and isinstance(record.get("isolation"), list):
            isolation = [str(layer) for layer in record["isolation"]]
        elif not load_error and isinstance(record.get("load_error"), str):
            load_error = record["load_error"][:500]
        elif index is not None and index not in seen:
            seen.add(index)
            errors[index] = str(record.get("error") or "")[:300]
            if mode == "tests":
                ok[index] = record.get("ok") is True
            elif "value" in record and not errors[index]:
                try:
                    values[index], ok[index] = decode(record["value"]), True
                except ValueError as err:
                    errors[index] = f"returned something that is not plain data ({err})"
        elif record.get("done") is True:
            done = True
    if not done and not load_error:
        errors = [e or "did not complete" for e in errors]
    return ok, values, errors, load_error, isolation or []


def _launch(python: str, cfg: dict, outdir: Path, timeout_s: float, cgroup: str | None):
    """Start the harness, wait for it; returns (pid, returncode, timed_out, result text)."""
    result_path = outdir / "results"
    result_fd = os.open(result_path, os.O_WRONLY | os.O_CREAT, 0o600)
    cfg = {**cfg, "result_fd": result_fd, "cgroup": cgroup}
    (outdir / "stdin").write_text(json.dumps(cfg) + "\n")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": cfg["workdir"], "LANG": "C.UTF-8"}
    with open(outdir / "stdin", "rb") as stdin, open(outdir / "stdout", "wb") as stdout, \
            open(outdir / "stderr", "wb") as stderr:
        try:
            proc = subprocess.Popen(
                [python, "-I", "-B", "-c", _CHILD_SOURCE], stdin=stdin, stdout=stdout,
                stderr=stderr, cwd=cfg["workdir"], env=env, start_new_session=True,
                pass_fds=(result_fd,), close_fds=True,
            )
        finally:
            os.close(result_fd)
        timed_out = not wait_exit(proc, timeout_s)
        _kill_all(proc, cfg.get("uid"), cgroup)
    text = _read_head(result_path, (cfg["max_file_mb"] + 1) * 1024 * 1024)
    return proc.pid, proc.returncode, timed_out, text


def choose_python() -> tuple[str, bool]:
    """(interpreter, drop_uid): probed once, see the module docstring."""
    global _probe_result
    with _probe_lock:
        if _probe_result is not None:
            return _probe_result
        if os.geteuid() != 0:
            _probe_result = (sys.executable, False)
            return _probe_result
        system = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
        candidates = [system, sys.executable]  # the system one first: no venv packages
        probe = "import json, math, re, collections, itertools, functools, heapq, string\n"
        for python in dict.fromkeys(c for c in candidates if c):
            result = _run({"mode": "tests", "code": probe, "tests": ["assert math.sqrt(4) == 2"]},
                          python, True, {})
            if result.passed == 1 and "uid" in result.isolation:
                _probe_result = (python, True)
                return _probe_result
        _probe_result = (sys.executable, False)
        return _probe_result


def _limits(timeout_s, per_test_timeout_s, **limits) -> dict:
    return {**DEFAULT_LIMITS, **limits, "timeout_s": timeout_s,
            "per_test_timeout_s": per_test_timeout_s or timeout_s}


def run_sandboxed(code: str, tests: list[str] | None = None, setup: str = "",
                  timeout_s: float = 5.0, per_test_timeout_s: float | None = None,
                  **limits) -> SandboxResult:
    """Run ``code``, then ``setup``, then each of ``tests`` (Python source) in the sandbox.

    With ``tests=None`` the program itself is the single test: it passes iff it runs to the
    end without an exception. ``timeout_s`` is wall-clock for the whole run;
    ``per_test_timeout_s`` (default ``timeout_s``) bounds loading and each test separately.
    Other limits (``memory_mb``, ``cpu_s``, ``max_file_mb``, ``max_procs``, ``max_files``,
    ``max_disk_mb``) default to ``DEFAULT_LIMITS``. The outcome is reported from inside the
    sandbox: use it to check containment, not to score (see ``call_sandboxed``).
    """
    python, drop_uid = choose_python()
    job = {"mode": "tests", "code": code, "setup": setup,
           "tests": ["pass"] if tests is None else list(tests)}
    return _run(job, python, drop_uid, _limits(timeout_s, per_test_timeout_s, **limits))


def call_sandboxed(code: str, entry_point: str, calls: list, setup: str = "",
                   stop_on_error: bool = False, timeout_s: float = 5.0,
                   per_test_timeout_s: float | None = None, **limits) -> SandboxResult:
    """Run ``code`` and call ``entry_point`` once per item of ``calls``.

    Each call is the tagged plain-data form (``plaindata.encode``) of ``[args, kwargs]``.
    ``results[i]`` says whether call ``i`` returned plain data, ``values[i]`` is that value
    (decoded here, in the parent) and ``errors[i]`` what went wrong otherwise. With
    ``stop_on_error`` the remaining calls are skipped after the first failure.
    """
    python, drop_uid = choose_python()
    job = {"mode": "calls", "code": code, "setup": setup, "entry_point": entry_point,
           "calls": list(calls), "stop_on_error": stop_on_error}
    return _run(job, python, drop_uid, _limits(timeout_s, per_test_timeout_s, **limits))


def _run(job: dict, python: str, drop_uid: bool, limits: dict) -> SandboxResult:
    limits = {**DEFAULT_LIMITS, **limits}
    size = len(job["calls"] if job["mode"] == "calls" else job["tests"])
    uid = random.SystemRandom().randrange(10_000_000, 20_000_000) if drop_uid else None
    dirs = [Path(tempfile.mkdtemp(prefix=f"lopd-sbx-{kind}")).resolve()
            for kind in ("", "out-", "root-")]
    workdir, outdir, rootdir = dirs
    nonce = secrets.token_hex(16)
    start = time.monotonic()
    cgroup = make_cgroup(limits["memory_mb"], limits["max_procs"])
    try:
        if uid is not None:
            os.chown(workdir, uid, uid)
        os.chmod(workdir, 0o700)
        cfg = {**job, **limits, "nonce": nonce, "workdir": str(workdir),
               "root_dir": str(rootdir), "uid": uid, "cpu_s": max(1, int(limits["cpu_s"]))}
        pid, returncode, timed_out, lines = _launch(python, cfg, outdir, limits["timeout_s"],
                                                    cgroup)
        ok, values, errors, load_error, isolation = _parse(lines, nonce, size, job["mode"])
        stdout, stderr = _tail(outdir / "stdout"), _tail(outdir / "stderr")
    finally:
        remove_cgroup(cgroup)
        for path in dirs:
            remove_tree(path)
    passed = sum(ok)
    return SandboxResult(
        passed=passed, failed=size - passed, results=ok, timed_out=timed_out,
        returncode=returncode, stdout=stdout, stderr=stderr, load_error=load_error,
        errors=errors, isolation=isolation, duration_s=time.monotonic() - start, pid=pid,
        uid=uid, values=values,
    )
