"""HumanEval's check functions, run outside the sandbox on plain data only.

HumanEval tests are ``check(candidate)`` functions full of ``assert candidate(...) == ...``.
Running them next to the candidate lets the candidate forge the verdict, so they run here, in
a separate trusted interpreter that never sees candidate code:

1. ``record_calls``: once per problem, ``check`` runs on the canonical solution wrapped in a
   recorder; the result is the list of inputs ``[args, kwargs]`` it calls the function with
   (plain data, ``lopd.envs.plaindata``).
2. The candidate runs in the sandbox on those inputs (``sandbox.call_sandboxed``); only the
   returned values come back, as plain data.
3. ``check_outputs``: ``check`` runs again on a replayer that answers call ``i`` with the
   candidate's value ``i`` (rebuilt from plain data, so no custom ``__eq__``); a call that was
   not recorded, or that the candidate failed, is an assertion failure.

The check keeps HumanEval's own comparisons (tolerances, ``poly(coeffs, root)`` ...). Its
module-level ``random`` is seeded and string hashing fixed (``PYTHONHASHSEED=0``) so recording
and replay make the same calls. The problem's prompt runs first, so helpers it defines
(``poly``, ``encode_cyclic``) are the trusted ones, not the candidate's; the function's own
name is bound to the recorder or replayer, since a few checks call it by name (as in
HumanEval, where that name is the candidate). The child process has
CPU, memory and wall-clock limits (its code is ``_check_child.py``, sent as source to the same
interpreter the sandbox uses); every failure is returned as ``(False, reason)``.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import tempfile
from pathlib import Path

from lopd.envs.cleanup import remove_tree
from lopd.envs.plaindata import loads_json
from lopd.envs.sandbox import choose_python

_MARK = "lopd-check "
_CHILD_SOURCE = "\n".join((Path(__file__).parent / name).read_text()
                          for name in ("plaindata.py", "_check_child.py"))


def _run_child(job: dict, timeout_s: float) -> dict:
    workdir = tempfile.mkdtemp(prefix="lopd-check-")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    mark = f"{_MARK}{secrets.token_hex(8)} "  # a verdict line nothing else can print
    job = {**job, "cpu_s": max(1, int(timeout_s)), "mark": mark}
    try:
        proc = subprocess.Popen(
            [choose_python()[0], "-s", "-B", "-c", _CHILD_SOURCE], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=workdir, env=env,
            start_new_session=True, text=True,
        )
        try:
            out, _ = proc.communicate(json.dumps(job), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": "the check timed out"}
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        lines = [line for line in out.splitlines() if line.startswith(mark)]
        verdict = loads_json(lines[-1][len(mark):]) if lines else None
    except (OSError, ValueError) as err:
        return {"ok": False, "error": f"the check could not run: {err}"}
    finally:
        remove_tree(workdir)
    if not isinstance(verdict, dict):
        return {"ok": False, "error": "the check gave no verdict"}
    return verdict


def record_calls(prompt: str, solution: str, test: str, entry_point: str,
                 timeout_s: float = 60.0) -> list:
    """The inputs ``check`` gives the reference solution, as plain data; raises if it fails."""
    verdict = _run_child({"mode": "record", "prompt": prompt, "solution": solution,
                          "test": test, "entry_point": entry_point}, timeout_s)
    if not verdict.get("ok") or not isinstance(verdict.get("calls"), list):
        raise RuntimeError(f"the reference solution fails its check: {verdict.get('error')}")
    return verdict["calls"]


def check_outputs(prompt: str, test: str, entry_point: str, calls: list, outputs: list,
                  timeout_s: float = 10.0) -> tuple[bool, str]:
    """Replay the candidate's outputs through ``check``: ``outputs[i]`` is ``[value]`` (the
    tagged plain-data form) for a call that returned, anything else for one that did not."""
    verdict = _run_child({"mode": "check", "prompt": prompt, "test": test, "calls": calls,
                          "outputs": outputs, "entry_point": entry_point}, timeout_s)
    return verdict.get("ok") is True, str(verdict.get("error", ""))
