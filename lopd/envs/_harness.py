"""The program that runs inside the sandbox (executed as ``python -I -c <source>``).

Never imported by the parent: ``lopd.envs.sandbox`` sends the source of ``plaindata.py``,
``_confine.py`` and this file, joined, to a fresh interpreter. Standard library only,
Python 3.9 syntax.

Order of operations (all before any candidate code is read):
1. read the payload (JSON, one line) from stdin, then point stdin at ``/dev/null``;
2. ``confine(cfg)`` (``_confine.py``) and report which layers took effect;
3. exec the candidate code (then the optional setup) in a fresh namespace;
4. in ``calls`` mode, call the entry point on each input and report what it returned, as
   plain data (``plaindata.encode``); in ``tests`` mode, exec each test snippet and report
   whether it raised.

Everything this process writes is only a claim by the candidate, who shares the process and
can write anything on the result descriptor: the parent trusts none of it. In ``calls`` mode
that costs nothing, since a reported value is compared outside this process against expected
values it never sees; ``tests`` mode is kept for containment checks, not for scoring.
"""

import json
import os
import signal
import sys

if __package__:  # imported for reading or linting; in the sandbox these arrive as source
    from lopd.envs._confine import SANDBOX_DIR, confine
    from lopd.envs.plaindata import decode, encode

_TIMEOUT_MESSAGE = "call timed out"


def _on_alarm(signum, frame):
    raise TimeoutError(_TIMEOUT_MESSAGE)


def _limited(fn, seconds):
    """Run ``fn()`` under a wall-clock alarm; returns (value, error text or None)."""
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        value = fn()
        signal.setitimer(signal.ITIMER_REAL, 0)
        return value, None
    except BaseException as err:  # noqa: BLE001 - any failure of the candidate is a result
        signal.setitimer(signal.ITIMER_REAL, 0)
        return None, f"{type(err).__name__}: {err}"[:300]


def _call_entry(namespace, entry_point, call):
    args, kwargs = decode(call)
    return encode(namespace[entry_point](*args, **kwargs))


def _run_calls(cfg, namespace, report):
    for index, call in enumerate(cfg["calls"]):
        value, error = _limited(lambda call=call: _call_entry(namespace, cfg["entry_point"], call),
                                cfg["per_test_timeout_s"])
        if error is None:
            report({"call": index, "value": value})
        else:
            report({"call": index, "error": error})
            if cfg.get("stop_on_error"):
                break


def _run_tests(cfg, namespace, report):
    for index, test in enumerate(cfg["tests"]):
        code = compile(test, f"<test {index}>", "exec")
        _, error = _limited(lambda code=code: exec(code, namespace),  # noqa: S102
                            cfg["per_test_timeout_s"])
        report({"test": index, "ok": error is None, "error": error or ""})


def _load(cfg, namespace):
    exec(compile(cfg["code"], "<candidate>", "exec"), namespace)  # noqa: S102 - sandboxed
    if cfg.get("setup"):
        exec(compile(cfg["setup"], "<setup>", "exec"), namespace)  # noqa: S102


def _main():
    cfg = json.loads(sys.stdin.readline())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    nonce, out = cfg.pop("nonce"), os.fdopen(cfg.pop("result_fd"), "w")

    def report(record):
        out.write(nonce + " " + json.dumps(record) + "\n")
        out.flush()

    os.chdir(cfg["workdir"])
    report({"isolation": confine(cfg)})
    if os.getcwd() == SANDBOX_DIR:
        os.environ.update(HOME=SANDBOX_DIR, TMPDIR=SANDBOX_DIR)
    signal.signal(signal.SIGALRM, _on_alarm)
    namespace = {"__name__": "__candidate__", "__builtins__": __builtins__}
    _, error = _limited(lambda: _load(cfg, namespace), cfg["per_test_timeout_s"])
    if error is not None:
        report({"load_error": error[:500]})
        return
    if cfg["mode"] == "calls":
        _run_calls(cfg, namespace, report)
    else:
        _run_tests(cfg, namespace, report)
    report({"done": True})


if __name__ == "__main__":
    _main()
