"""Hostile model-written code: no forged rewards, no scorer crashes, no escapes, real caps.

The programs are in ``hostile_programs.py``. Caps are measured from inside the sandbox: the
candidate reports what it managed (bytes written, files made, memory its children held), and
the test checks the numbers against the limits. Layers that this machine cannot provide
(namespaces, seccomp, a private uid) skip the tests that need them, naming the layer.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from lopd.envs import code_tasks
from lopd.envs.cleanup import live_processes, make_cgroup, remove_cgroup, remove_tree
from lopd.envs.code import CodeEnv, humaneval_path, load_code_tasks, load_humaneval
from lopd.envs.plaindata import decode, encode, loads_json
from lopd.envs.sandbox import _parse, call_sandboxed, run_sandboxed

sys.path.insert(0, str(Path(__file__).parent))
from hostile_programs import HOSTILE

PROBE_SOCKET = "/tmp/lopd-hostile-probe.sock"
OUTSIDE_FILES = ("/tmp/lopd_hostile_escape", "/work/lopd_hostile_escape")


def one_call(code: str, args: list, **limits):
    """Call ``f(*args)`` in the sandbox; returns the SandboxResult."""
    return call_sandboxed(code, "f", [encode([args, {}])], timeout_s=limits.pop("timeout_s", 5.0),
                          **limits)


@pytest.fixture(scope="module")
def layers() -> list[str]:
    return one_call("def f():\n    return 1\n", []).isolation


def need(layers: list[str], layer: str) -> None:
    if layer not in layers:
        pytest.skip(f"the '{layer}' layer is not available on this machine")


@pytest.fixture(scope="module")
def unix_listener():
    if os.path.exists(PROBE_SOCKET):
        os.unlink(PROBE_SOCKET)
    server = socket.socket(socket.AF_UNIX)
    server.bind(PROBE_SOCKET)
    os.chmod(PROBE_SOCKET, 0o777)
    server.listen(16)
    server.settimeout(0.05)
    yield server
    server.close()
    Path(PROBE_SOCKET).unlink(missing_ok=True)


def accepted(server: socket.socket) -> int:
    count = 0
    while True:
        try:
            connection, _ = server.accept()
        except OSError:
            return count
        connection.close()
        count += 1


@pytest.mark.parametrize("name,suite,program", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_program_scores_zero(name, suite, program, unix_listener):
    task = load_humaneval(1)[0] if suite == "humaneval" else load_code_tasks(1)[0]
    result = CodeEnv(task, timeout_s=2.0).step(f"```python\n{program}```")
    assert result.reward == 0.0 and not result.info["success"], (name, result.info)
    assert "scorer_error" not in result.info, result.info
    assert accepted(unix_listener) == 0, f"{name} reached a Unix socket outside the sandbox"
    for path in OUTSIDE_FILES:
        assert not os.path.exists(path), f"{name} wrote {path}"


def test_canonical_solutions_still_pass():
    for task in load_humaneval()[::41] + load_code_tasks()[::50]:
        result = CodeEnv(task).step(task.reference)
        assert result.reward == 1.0, (task.id, result.info)


@pytest.mark.slow
def test_every_canonical_solution_passes():
    for task in load_humaneval() + load_code_tasks():
        assert CodeEnv(task).step(task.reference).reward == 1.0, task.id


def test_plain_data_round_trip_and_refusals():
    value = [1, -2**300, 2.5, float("inf"), "é\ud800", b"\x00", (1, (2,)), {"a": {3, 4}},
             frozenset({"x"}), None, True, {(1, 2): [False]}]
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and type(back[6]) is tuple and type(back[7]["a"]) is set
    assert type(decode(encode(True))) is bool and decode(encode(float("nan"))) != 0
    lazy = decode(encode(map(str, [1, 2])))  # an iterator stays an iterator: != a list
    assert lazy != ["1", "2"] and list(lazy) == ["1", "2"]
    assert decode(encode(range(1, 9, 3))) == range(1, 9, 3)

    class Sneaky(int):
        pass

    for bad in (Sneaky(1), object(), [Sneaky(2)], {"k": lambda: 0}):
        with pytest.raises(TypeError):
            encode(bad)
    deep = None
    for _ in range(10_000):
        deep = ["l", [deep]]
    garbage = [["i", "zz"], ["i", 5], ["q", []], ["d", [[["l", []], None]]], ["l", 3],
               ["set", [["l", []]]], [1, 2, 3], "text", 7, deep, ["i", "f" * 200_000]]
    for bad in garbage:
        with pytest.raises(ValueError):
            decode(bad)
    for text in ("[" * 100_000, "1" * 5000, "{", "\udcff"):
        try:
            loads_json(text)
        except ValueError:
            pass


def test_forged_result_lines_never_raise():
    nonce = "n" * 32
    records = ['{"test": "x", "ok": true}', '{"test": 1e999, "ok": true}', '{"test": [0]}',
               '{"call": 0, "value": ["i", "zz"]}', '{"call": -1, "value": null}',
               '{"call": true, "value": null}', '{"isolation": 5}', '{"load_error": []}',
               "[" * 50_000, '{"call": 99999999999999999999999}', "null", '"s"',
               '{"test": NaN}', '{"call": 0, "value": null, "error": {"x": 1}}']
    text = "\n".join(f"{nonce} {record}" for record in records) + "\n\ud800 \x00"
    for mode in ("tests", "calls"):
        ok, values, _, load_error, _ = _parse(text, nonce, 2, mode)
        assert ok == [False, False] and values == [None, None] and isinstance(load_error, str)


def test_cleanup_never_recurses_or_follows_links(tmp_path):
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "precious").write_text("x")
    memory_fs = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # rmdir is slow on disk
    tree = Path(tempfile.mkdtemp(dir=memory_fs))
    (tree / "locked").mkdir()
    (tree / "locked" / "file").write_text("x")
    os.chmod(tree / "locked", 0)
    fd = os.open(tree, os.O_RDONLY)
    for _ in range(1500):  # deeper than the recursion limit, a path longer than PATH_MAX
        os.mkdir("d" * 8, dir_fd=fd)
        child = os.open("d" * 8, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.symlink(str(keep), "link", dir_fd=fd)
    open(os.open("nonce", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "w").close()
    os.close(fd)
    assert remove_tree(tree) and not tree.exists()
    assert (keep / "precious").exists()
    assert remove_tree(tmp_path / "missing")


def test_disk_and_file_count_caps(layers):
    fill = ("def f(n):\n    total = 0\n    try:\n        for i in range(n):\n"
            "            with open(f'part{i}', 'wb') as h:\n"
            "                for _ in range(8):\n                    h.write(b'x' * (1 << 20))\n"
            "                    total += 1 << 20\n    except OSError:\n        pass\n"
            "    return total\n")
    result = one_call(fill, [16], max_disk_mb=16, max_file_mb=8)
    assert result.results == [True]
    limit_mb = 16 if "disk-cap" in layers else 8 * 8  # at least 8 files of max_file_mb
    assert result.values[0] <= limit_mb * (1 << 20), result.values
    many = ("def f():\n    n = 0\n    try:\n        while n < 100000:\n"
            "            open(f'f{n}', 'w').close()\n            n += 1\n    except OSError:\n"
            "        pass\n    return n\n")
    result = one_call(many, [], max_files=300)
    assert result.results == [True] and 0 < result.values[0] <= 300, result.values


def test_memory_cap_covers_the_process_tree():
    hog = ("import os, time\ndef f(children, mb):\n    pipes = []\n    for _ in range(children):\n"
           "        r, w = os.pipe()\n        try:\n            pid = os.fork()\n"
           "        except OSError:\n            break\n        if pid == 0:\n"
           "            held = []\n            try:\n                while len(held) < mb:\n"
           "                    held.append(bytearray(1 << 20))\n            except MemoryError:\n"
           "                pass\n            os.write(w, str(len(held)).encode())\n"
           "            time.sleep(2)\n            os._exit(0)\n        pipes.append(r)\n"
           "    return sum(int(os.read(r, 32) or 0) for r in pipes)\n")
    result = one_call(hog, [12, 400], memory_mb=512)
    assert result.results == [True], result.errors
    assert result.values[0] <= 512, f"children together held {result.values[0]} MB"


def test_no_sockets_of_any_kind(layers, unix_listener):
    code = ("import socket, ctypes\ndef f(path):\n    out = []\n"
            "    for family, address in ((socket.AF_UNIX, path), (socket.AF_INET, ('127.0.0.1', 9))):\n"
            "        try:\n            s = socket.socket(family)\n            s.connect(address)\n"
            "            out.append('connected')\n        except OSError as e:\n"
            "            out.append(type(e).__name__)\n    return out\n")
    result = one_call(code, [PROBE_SOCKET])
    assert result.results == [True] and "connected" not in result.values[0]
    assert accepted(unix_listener) == 0
    need(layers, "seccomp-socket")
    spawned = ("import subprocess, sys\ndef f(path):\n    return subprocess.run([sys.executable, '-c',"
               " 'import socket, sys\\ns = socket.socket(socket.AF_UNIX)\\ns.connect(sys.argv[1])',"
               " path], capture_output=True).returncode\n")
    result = one_call(spawned, [PROBE_SOCKET])  # the filter is inherited by children
    assert result.results == [False] or result.values[0] != 0  # refused to start, or failed
    assert accepted(unix_listener) == 0


def test_files_outside_cannot_be_read(layers, tmp_path):
    """The reference data (HumanEval, this repository's task generator) and other files stay
    out of reach: absent under a private root, refused by the read guard otherwise."""
    if "private-root" not in layers and "read-guard" not in layers:
        pytest.skip("neither a private root nor the read guard here")
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    os.chmod(tmp_path, 0o755)
    os.chmod(secret, 0o644)
    code = ("def f(paths):\n    read = []\n    for p in paths:\n        try:\n"
            "            open(p, 'rb').read(1)\n            read.append(p)\n"
            "        except OSError:\n            pass\n    return read\n")
    paths = [str(secret), str(humaneval_path()), code_tasks.__file__, "/proc/1/environ"]
    result = one_call(code, [paths])
    assert result.results == [True] and result.values[0] == [], result.values


def test_other_processes_cannot_be_signalled(layers):
    if "uid" not in layers and "pidns" not in layers:
        pytest.skip("neither a private uid nor a pid namespace here")
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        code = ("import os, signal\ndef f(pid):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
                "        return 'killed'\n    except OSError as e:\n        return type(e).__name__\n")
        result = one_call(code, [sleeper.pid])
        assert result.values[0] in ("PermissionError", "ProcessLookupError"), result.values
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_isolation_layers_are_reported(layers):
    assert {"rlimits", "audit-hook"} <= set(layers)
    assert "cgroup" in layers or "proc-x-mem" in layers
    print("isolation:", layers)


def test_tests_mode_still_contains(layers):
    result = run_sandboxed("import os\nos._exit(0)\n", ["assert True"])
    assert result.passed == 0


def test_nothing_is_left_behind(tmp_path, monkeypatch):
    """Working, result (nonce) and root directories are deleted whatever the program did."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    litter = ("import os\ndef f():\n    for _ in range(1200):\n        os.mkdir('d')\n"
              "        os.chdir('d')\n    open('x', 'w').write('x')\n    os.chmod('.', 0)\n"
              "    return 1\n")
    result = one_call(litter, [], max_files=2000)
    assert result.total == 1 and list(tmp_path.iterdir()) == []


def test_cgroup_helpers_degrade_quietly():
    group = make_cgroup(256, 8)
    try:
        assert group is None or (Path(group) / "memory.max").read_text().strip() == str(256 << 20)
    finally:
        remove_cgroup(group)
    remove_cgroup(None)
    remove_cgroup("/nonexistent/lopd-sbx-x")


def test_live_processes_sees_a_group_until_it_has_exited():
    """The list the sandbox waits on after its kills: running members count, zombies do not."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             start_new_session=True)
    try:
        assert live_processes(child.pid) == [child.pid]
        assert child.pid in live_processes(-1, uid=os.getuid())
        assert live_processes(-1, uid=os.getuid() + 1_000_000_000) == []
        os.kill(child.pid, 9)
        deadline = time.monotonic() + 5
        while live_processes(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # SIGKILLed, then a zombie until reaped: both leave the list
        assert live_processes(child.pid) == []
    finally:
        child.kill()
        child.wait()
