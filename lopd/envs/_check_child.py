"""The trusted checker process of ``lopd.envs.checker`` (run as ``python -s -B -c <source>``).

Never imported by the parent: ``checker.py`` sends ``plaindata.py`` and this file, joined, to a
fresh interpreter with ``PYTHONHASHSEED=0``. Standard library only, Python 3.9 syntax. It reads
one job (JSON) on stdin and writes its verdict as the last line, ``<job["mark"]><json>``.
"""

import json
import sys

if __package__:  # imported for reading or linting; in the checker these arrive as source
    from lopd.envs.plaindata import decode, encode


class _Replay:
    def __init__(self, calls, outputs):
        self.calls, self.outputs, self.count = calls, outputs, 0

    def __call__(self, *args, **kwargs):
        index, self.count = self.count, self.count + 1
        if index >= len(self.calls) or encode([list(args), kwargs]) != self.calls[index]:
            raise AssertionError(f"call {index} was not made by the reference run")
        output = self.outputs[index] if index < len(self.outputs) else None
        if type(output) is not list or len(output) != 1:
            raise AssertionError(f"the candidate returned no value for call {index}")
        return decode(output[0])


class _Recorder:
    def __init__(self, function):
        self.function, self.calls = function, []

    def __call__(self, *args, **kwargs):
        self.calls.append(encode([list(args), kwargs]))
        return self.function(*args, **kwargs)


def _child(job):
    """Runs in the checker process: record the reference's calls, or replay outputs."""
    import random
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (job["cpu_s"], job["cpu_s"]))
    namespace = {"__name__": "__check__"}
    exec(compile(job["prompt"], "<prompt>", "exec"), namespace)  # noqa: S102 - trusted
    exec(compile(job["test"], "<test>", "exec"), namespace)  # noqa: S102 - trusted test code
    if job["mode"] == "record":
        reference = {"__name__": "__reference__"}
        exec(compile(job["prompt"] + job["solution"], "<reference>", "exec"), reference)  # noqa: S102
        target = _Recorder(reference[job["entry_point"]])
    else:
        target = _Replay(job["calls"], job["outputs"])
    namespace[job["entry_point"]] = target  # some checks call the function by its name
    random.seed(0)
    try:
        namespace["check"](target)
    except BaseException as err:  # noqa: BLE001 - the verdict, whatever was raised
        return {"ok": False, "error": f"{type(err).__name__}: {err}"[:300]}
    return {"ok": True, "calls": getattr(target, "calls", [])}



if __name__ == "__main__":
    _job = json.loads(sys.stdin.read())
    sys.stdout.write("\n" + _job["mark"] + json.dumps(_child(_job)) + "\n")
