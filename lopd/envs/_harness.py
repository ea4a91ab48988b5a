"""The program that runs inside the sandbox (executed as ``python -I -c <this source>``).

It is kept as a separate module so it can be read, linted and tested, but it is never imported
by the parent: ``lopd.envs.sandbox`` passes its *source* to the child interpreter. It must only
use the standard library and must work on Python 3.9+ (the sandbox may use a system Python).

Order of operations (all before any candidate code is read):
1. read the payload (JSON, one line) from stdin; it holds the nonce, limits and the code;
2. isolate itself, best effort, recording which layers applied: a new network namespace and a
   new mount namespace in which every mount is re-mounted read-only except the working
   directory (root only), resource limits, then a switch to an unprivileged uid/gid;
3. install an audit hook that refuses sockets and writes outside the working directory
   (a second layer that also works where namespaces are unavailable);
4. exec the candidate code in a fresh namespace, then the setup, then each test separately,
   reporting one ``<nonce> <json>`` line per test on a private result fd. The candidate never
   sees the nonce (it only lived in this function's locals and stdin is already drained), so
   it cannot forge a passing line by printing.
"""

import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWUSER = 0x00020000, 0x40000000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 32, 4096, 16384, 1 << 18
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATH_EVENTS = {
    "os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.chmod": 1, "os.chown": 1,
    "os.truncate": 1, "shutil.rmtree": 1, "os.rename": 2, "os.symlink": 2, "os.link": 2,
}


def _mount_readonly(libc, workdir):
    """New mount namespace; everything read-only except ``workdir`` (bind-mounted on itself)."""
    if libc.unshare(CLONE_NEWNS) != 0:
        return False
    libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None)
    wd = workdir.encode()
    if libc.mount(wd, wd, None, MS_BIND, None) != 0:
        return False
    libc.mount(None, wd, None, MS_BIND | MS_REMOUNT | MS_NOSUID, None)
    with open("/proc/self/mountinfo") as handle:
        points = [line.split()[4] for line in handle]
    root_ok = False
    for point in points:
        if point == workdir:
            continue
        flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID
        done = libc.mount(None, point.encode(), None, flags, None) == 0
        root_ok = root_ok or (done and point == "/")
    os.chdir(workdir)  # re-enter through the writable bind mount
    return root_ok


def _isolate(cfg):
    layers = []
    libc = ctypes.CDLL(None, use_errno=True)
    if os.geteuid() == 0:
        if libc.unshare(CLONE_NEWNET) == 0:
            layers.append("netns")
        if _mount_readonly(libc, cfg["workdir"]):
            layers.append("readonly-fs")
    elif libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        layers.append("netns")
    mb = 1024 * 1024
    limits = {
        resource.RLIMIT_CPU: cfg["cpu_s"],
        resource.RLIMIT_AS: cfg["memory_mb"] * mb,
        resource.RLIMIT_FSIZE: cfg["max_file_mb"] * mb,
        resource.RLIMIT_NPROC: cfg["max_procs"],
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_NOFILE: 256,
    }
    for kind, value in limits.items():
        try:
            resource.setrlimit(kind, (value, value))
        except (ValueError, OSError):
            pass
    layers.append("rlimits")
    uid = cfg.get("uid")
    if uid is not None and os.geteuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        layers.append("uid")
    return layers


def _install_guard(workdir):
    """Audit hook: no sockets, no writes outside the working directory."""
    root = os.path.realpath(workdir)
    realpath, fspath, sep = os.path.realpath, os.fspath, os.sep

    def inside(path):
        try:
            full = realpath(fspath(path))
        except (TypeError, ValueError):
            return isinstance(path, int)  # an fd: already opened
        return full == root or full.startswith(root + sep)

    def hook(event, args):
        if event.startswith("socket."):
            raise PermissionError("network access is disabled in the sandbox")
        if event == "open" and len(args) >= 3:
            path, mode, flags = args[0], args[1], args[2]
            writing = bool(flags & _WRITE_FLAGS) if isinstance(flags, int) else False
            writing = writing or (isinstance(mode, str) and any(c in mode for c in "wax+"))
            if writing and not inside(path):
                raise PermissionError(f"writing outside the sandbox directory: {path!r}")
        elif event in _PATH_EVENTS:
            for path in args[: _PATH_EVENTS[event]]:
                if not inside(path):
                    raise PermissionError(f"{event} outside the sandbox directory: {path!r}")

    sys.addaudithook(hook)


def _on_alarm(signum, frame):
    raise TimeoutError("test timed out")


def _main():
    cfg = json.loads(sys.stdin.readline())
    nonce, fd = cfg.pop("nonce"), cfg.pop("result_fd")
    out = os.fdopen(fd, "w")

    def report(record):
        out.write(nonce + " " + json.dumps(record) + "\n")
        out.flush()

    os.chdir(cfg["workdir"])
    report({"isolation": _isolate(cfg)})
    code, setup, tests = cfg.pop("code"), cfg.pop("setup"), cfg.pop("tests")
    per_test_s = cfg["per_test_timeout_s"]
    _install_guard(cfg["workdir"])
    signal.signal(signal.SIGALRM, _on_alarm)
    namespace = {"__name__": "__candidate__", "__builtins__": __builtins__}
    try:
        signal.setitimer(signal.ITIMER_REAL, per_test_s)
        exec(compile(code, "<candidate>", "exec"), namespace)  # noqa: S102 - sandboxed
        if setup:
            exec(compile(setup, "<setup>", "exec"), namespace)  # noqa: S102
        signal.setitimer(signal.ITIMER_REAL, 0)
    except BaseException as err:  # noqa: BLE001 - any failure of the candidate is a result
        signal.setitimer(signal.ITIMER_REAL, 0)
        report({"load_error": f"{type(err).__name__}: {err}"[:500]})
        return
    for index, test in enumerate(tests):
        try:
            signal.setitimer(signal.ITIMER_REAL, per_test_s)
            exec(compile(test, f"<test {index}>", "exec"), namespace)  # noqa: S102
            signal.setitimer(signal.ITIMER_REAL, 0)
            report({"test": index, "ok": True})
        except BaseException as err:  # noqa: BLE001
            signal.setitimer(signal.ITIMER_REAL, 0)
            report({"test": index, "ok": False, "error": f"{type(err).__name__}: {err}"[:300]})
    report({"done": True})


if __name__ == "__main__":
    _main()
