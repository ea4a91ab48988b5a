"""Run untrusted Python (model-written code and its tests) in a contained child process.

``run_sandboxed(code, tests, ...)`` starts ``python -I -B -c <lopd/envs/_harness.py>`` in its
own session/process group with a scrubbed environment (PATH, HOME=<tmp dir>, LANG only) and a
fresh temporary working directory, feeds it the code on stdin, waits with a wall-clock timeout,
then kills the whole process group (and, when running as root, every process of the sandbox's
private uid, which also catches children that called ``setsid``) and deletes the directory.

Containment layers (the harness applies them to itself before any candidate code is read; the
ones that took effect are returned in ``SandboxResult.isolation``):

- ``netns``: a new, empty network namespace (``unshare(CLONE_NEWNET)`` via libc, since
  ``os.unshare`` is Python 3.12+). As root directly; otherwise inside a new user namespace
  where the kernel allows it.
- ``readonly-fs`` (root only): a new mount namespace where every mount is re-mounted read-only
  and nosuid, except the working directory. Writes to /tmp, /dev/shm, the repo, ... fail.
- ``rlimits``: RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_CORE, RLIMIT_NOFILE.
- ``uid`` (root only): the harness drops to a random private uid/gid (10M-20M, no groups).
  RLIMIT_NPROC counts processes per uid and does not apply to root, so a private uid is what
  makes it bite (a fork bomb stops at ``max_procs``); it also hides the parent's
  ``/proc/<pid>/environ`` and makes post-run cleanup exact (``kill(-1)`` as that uid).
- an audit hook (always): refuses socket creation and writes/renames/deletes outside the
  working directory; the only layer available to an unprivileged user without namespaces.

Because the private uid cannot read ``/root``, the interpreter is chosen by a one-off probe:
the first of ``sys.executable`` and the system ``python3`` that can run the harness under the
uid switch (here: the venv lives under /root, so the system Python 3.11 is used); if none can,
the uid layer is skipped. Results travel on a private pipe-like file as ``<nonce> <json>``
lines, one per test, so a crash or timeout part-way still credits the tests that passed.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

_HARNESS = (Path(__file__).with_name("_harness.py")).read_text()
_TAIL = 2000
_probe_lock = threading.Lock()
_probe_result: tuple[str, bool] | None = None


@dataclass
class SandboxResult:
    """Outcome of one sandboxed run; ``results[i]`` is test ``i``'s pass/fail."""

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

    @property
    def total(self) -> int:
        return self.passed + self.failed

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` (a fork that switches to it and calls kill(-1))."""
    for _ in range(2):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            try:
                os.setgid(uid)
                os.setuid(uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)


def _cleanup(proc: subprocess.Popen, uid: int | None) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if uid is not None:
        _kill_uid(uid)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - should not happen after SIGKILL
        pass


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - _TAIL))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _parse(lines: str, nonce: str, n_tests: int) -> tuple[list[bool], list[str], str, list[str]]:
    results, errors = [False] * n_tests, [""] * n_tests
    load_error, isolation, done = "", [], False
    for line in lines.splitlines():
        if not line.startswith(nonce + " "):
            continue
        try:
            record = json.loads(line[len(nonce) + 1:])
        except json.JSONDecodeError:
            continue
        if "isolation" in record:
            isolation = list(record["isolation"])
        elif "load_error" in record:
            load_error = str(record["load_error"])
        elif "test" in record and 0 <= int(record["test"]) < n_tests:
            results[int(record["test"])] = bool(record["ok"])
            errors[int(record["test"])] = str(record.get("error", ""))
        elif record.get("done"):
            done = True
    if not done and not load_error:
        errors = [e or "did not complete" for e in errors]
    return results, errors, load_error, isolation


def _launch(python: str, cfg: dict, workdir: Path, outdir: Path, timeout_s: float):
    """Start the harness, wait for it; returns (pid, returncode, timed_out, result text)."""
    result_path = outdir / "results"
    result_fd = os.open(result_path, os.O_WRONLY | os.O_CREAT, 0o600)
    cfg = {**cfg, "result_fd": result_fd}
    (outdir / "stdin").write_text(json.dumps(cfg) + "\n")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir), "LANG": "C.UTF-8"}
    with open(outdir / "stdin", "rb") as stdin, open(outdir / "stdout", "wb") as stdout, \
            open(outdir / "stderr", "wb") as stderr:
        try:
            proc = subprocess.Popen(
                [python, "-I", "-B", "-c", _HARNESS], stdin=stdin, stdout=stdout,
                stderr=stderr, cwd=workdir, env=env, start_new_session=True,
                pass_fds=(result_fd,), close_fds=True,
            )
        finally:
            os.close(result_fd)
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        _cleanup(proc, cfg.get("uid"))
    return proc.pid, proc.returncode, timed_out, result_path.read_text(errors="replace")


def _choose_python() -> tuple[str, bool]:
    """(interpreter, drop_uid): probed once, see the module docstring."""
    global _probe_result
    with _probe_lock:
        if _probe_result is not None:
            return _probe_result
        if os.geteuid() != 0:
            _probe_result = (sys.executable, False)
            return _probe_result
        candidates = [sys.executable, shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")]
        probe = "import json, math, re, collections, itertools, functools, heapq, string\n"
        for python in dict.fromkeys(c for c in candidates if c):
            result = _run(probe, ["assert math.sqrt(4) == 2"], "", python, True, {})
            if result.passed == 1 and "uid" in result.isolation:
                _probe_result = (python, True)
                return _probe_result
        _probe_result = (sys.executable, False)
        return _probe_result


def run_sandboxed(
    code: str,
    tests: list[str] | None = None,
    setup: str = "",
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    cpu_s: int = 5,
    max_file_mb: int = 8,
    max_procs: int = 16,
    per_test_timeout_s: float | None = None,
) -> SandboxResult:
    """Run ``code`` then ``setup`` then each of ``tests`` (Python source) in the sandbox.

    With ``tests=None`` the program itself is the single test: it passes iff it runs to the
    end without an exception. ``timeout_s`` is wall-clock for the whole run;
    ``per_test_timeout_s`` (default ``timeout_s``) bounds loading and each test separately.
    """
    python, drop_uid = _choose_python()
    limits = {"timeout_s": timeout_s, "memory_mb": memory_mb, "cpu_s": cpu_s,
              "max_file_mb": max_file_mb, "max_procs": max_procs,
              "per_test_timeout_s": per_test_timeout_s or timeout_s}
    return _run(code, tests, setup, python, drop_uid, limits)


def _run(code, tests, setup, python, drop_uid, limits) -> SandboxResult:
    limits = {"timeout_s": 5.0, "memory_mb": 512, "cpu_s": 5, "max_file_mb": 8,
              "max_procs": 16, "per_test_timeout_s": 5.0, **limits}
    single = tests is None
    tests = ["pass"] if single else list(tests)
    uid = random.SystemRandom().randrange(10_000_000, 20_000_000) if drop_uid else None
    workdir = Path(tempfile.mkdtemp(prefix="lopd-sbx-")).resolve()
    outdir = Path(tempfile.mkdtemp(prefix="lopd-sbx-out-")).resolve()
    nonce = secrets.token_hex(16)
    start = time.monotonic()
    try:
        if uid is not None:
            os.chown(workdir, uid, uid)
        os.chmod(workdir, 0o700)
        cfg = {"nonce": nonce, "workdir": str(workdir), "uid": uid, "code": code,
               "setup": setup, "tests": tests, **{k: v for k, v in limits.items()}}
        cfg["cpu_s"] = max(1, int(cfg["cpu_s"]))
        pid, returncode, timed_out, lines = _launch(python, cfg, workdir, outdir, limits["timeout_s"])
        results, errors, load_error, isolation = _parse(lines, nonce, len(tests))
        stdout, stderr = _tail(outdir / "stdout"), _tail(outdir / "stderr")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(outdir, ignore_errors=True)
    passed = sum(results)
    return SandboxResult(
        passed=passed, failed=len(results) - passed, results=results, timed_out=timed_out,
        returncode=returncode, stdout=stdout, stderr=stderr, load_error=load_error,
        errors=errors, isolation=isolation, duration_s=time.monotonic() - start, pid=pid,
        uid=uid,
    )
