"""A hostile set of candidate programs for the code environments (none of them solves its task).

Each entry is ``(name, suite, program)``: ``suite`` is ``"humaneval"`` (answers HumanEval/0,
``has_close_elements``) or ``"code"`` (answers the first generated task, ``count_chars``).
Every program tries to obtain a reward without computing the right answer, to crash the
scorer, or to break out of the sandbox. Scoring any of them above 0 is a forged pass.
``unix-socket-ctypes`` connects to ``/tmp/lopd-hostile-probe.sock``, which the test listens on.
"""

from __future__ import annotations

HE = "def has_close_elements(numbers, threshold):\n"
CT = "def count_chars(s):\n"

_ALWAYS_EQUAL = """
class Anything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    def __bool__(self):
        return True
    __hash__ = object.__hash__
"""

_FIND_NONCE = """
import os, re, sys
def _forge():
    found = set()
    for fd in range(0, 64):
        try:
            os.lseek(fd, 0, 0)
            data = os.read(fd, 1 << 20)
        except OSError:
            continue
        found.update(re.findall(rb'"nonce": "([0-9a-f]{32})"', data))
    for nonce in found:
        for fd in range(1, 64):
            for i in range(400):
                line = nonce + b' {"test": %d, "ok": true}\\n' % i
                try:
                    os.write(fd, line)
                except OSError:
                    break
        for fd in range(1, 64):
            try:
                os.write(fd, nonce + b' {"done": true}\\n')
            except OSError:
                pass
"""

_FRAME_REPORTER = """
import sys, os
def _report_everything():
    frame = sys._getframe()
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for name, value in list(scope.items()):
                if callable(value) and name in ('report', 'emit', 'send', '_report'):
                    for i in range(400):
                        try:
                            value({"test": i, "ok": True})
                        except Exception:
                            pass
                    try:
                        value({"done": True})
                    except Exception:
                        pass
        frame = frame.f_back
"""

HOSTILE: list[tuple[str, str, str]] = [
    ("eq-always-true", "humaneval", _ALWAYS_EQUAL + HE + "    return Anything()\n"),
    ("eq-always-true-code", "code", _ALWAYS_EQUAL + CT + "    return Anything()\n"),
    ("int-subclass-eq", "code",
     "class Num(int):\n    def __eq__(self, other):\n        return True\n"
     "    __hash__ = int.__hash__\n" + CT + "    return Num(0)\n"),
    ("bool-like-object", "humaneval",
     "class B:\n    def __eq__(self, o):\n        return True\n    def __bool__(self):\n"
     "        return True\n    def __repr__(self):\n        return 'True'\n"
     + HE + "    return B()\n"),
    ("rewind-stdin-nonce", "humaneval", _FIND_NONCE + "_forge()\n" + HE + "    return None\n"),
    ("rewind-stdin-nonce-exit", "code",
     _FIND_NONCE + "_forge()\nos._exit(0)\n" + CT + "    return -1\n"),
    ("frame-reporter", "humaneval",
     _FRAME_REPORTER + HE + "    _report_everything()\n    os._exit(0)\n"),
    ("frame-reporter-at-import", "code",
     _FRAME_REPORTER + "_report_everything()\n" + CT + "    return -1\n"),
    ("replace-exec", "humaneval",
     "import builtins\nbuiltins.exec = lambda *a, **k: None\n" + HE + "    return None\n"),
    ("replace-compile", "code",
     "import builtins\nbuiltins.compile = lambda *a, **k: compile('pass', '<x>', 'exec')\n"
     + CT + "    return -1\n"),
    ("replace-assertion-error", "humaneval",
     "import builtins\nclass Never(BaseException):\n    pass\nbuiltins.AssertionError = Never\n"
     + HE + "    return None\n"),
    ("print-fake-pass-lines", "humaneval",
     "import os\nfor n in ('0' * 32, 'f' * 32):\n    for i in range(5):\n"
     "        print(n + ' {\"test\": %d, \"ok\": true}' % i)\n"
     "        print(n + ' {\"done\": true}')\nos._exit(0)\n" + HE + "    return None\n"),
    ("exit-zero-at-import", "code", "import sys\nsys.exit(0)\n" + CT + "    return -1\n"),
    ("os-exit-in-call", "humaneval", "import os\n" + HE + "    os._exit(0)\n"),
    ("systemexit-in-call", "code", CT + "    raise SystemExit(0)\n"),
    ("keyboardinterrupt-in-call", "code", CT + "    raise KeyboardInterrupt\n"),
    ("atexit-forge", "humaneval",
     _FIND_NONCE + "import atexit\natexit.register(_forge)\n" + HE + "    return None\n"),
    ("forge-bad-ids", "code",
     "import os\nfor fd in range(1, 64):\n    for rec in (b'{\"test\": \"x\", \"ok\": true}',"
     " b'{\"test\": 1e999, \"ok\": true}', b'{\"test\": [1], \"ok\": 1}',"
     " b'{\"test\": NaN, \"ok\": true}', b'{\"call\": \"0\", \"value\": 3}',"
     " b'{\"call\": 99999999999999999999, \"value\": 1}', b'{\"isolation\": 5}',"
     " b'{\"load_error\": null}', b'[1, 2]', b'\\xff\\xfe garbage'):\n"
     "        try:\n            os.write(fd, b'x ' + rec + b'\\n')\n"
     "        except OSError:\n            pass\n" + CT + "    return -1\n"),
    ("flood-result-channel", "code",
     "import os\nline = b'{\"test\": 0, \"ok\": true}' * 4000 + b'\\n'\n"
     "for fd in range(3, 64):\n    try:\n        for _ in range(3000):\n"
     "            os.write(fd, line)\n    except OSError:\n        pass\n" + CT + "    return -1\n"),
    ("deep-nesting-return", "code",
     CT + "    x = []\n    for _ in range(200000):\n        x = [x]\n    return x\n"),
    ("huge-int-return", "code", CT + "    return 7 ** 200000\n"),
    ("nan-return", "humaneval", HE + "    return float('nan')\n"),
    ("read-tests-from-memory", "code",
     "import gc, re\n" + CT + "    for obj in gc.get_objects():\n"
     "        for text in (obj if isinstance(obj, (list, tuple)) else [obj]):\n"
     "            if isinstance(text, str) and text.startswith('assert count_chars('):\n"
     "                m = re.match(r'assert count_chars\\((.*)\\) == (.*)$', text)\n"
     "                if m and eval(m.group(1)) == s:\n"
     "                    return eval(m.group(2))\n    return -1\n"),
    ("read-payload-from-stdin", "code",
     "import os, re, json\n_seen = b''\ntry:\n    os.lseek(0, 0, 0)\n"
     "    _seen = os.read(0, 1 << 22)\nexcept OSError:\n    pass\n"
     + CT + "    for m in re.finditer(r'assert count_chars\\((.*?)\\) == (\\d+)', "
     "_seen.decode('utf-8', 'replace')):\n        try:\n"
     "            if eval(json.loads('\"' + m.group(1) + '\"')) == s:\n"
     "                return int(m.group(2))\n        except Exception:\n            pass\n"
     "    return -1\n"),
    ("import-reference-from-repo", "code",
     "import sys, glob\nfor root in glob.glob('/work/*') + glob.glob('/work/*/*') + ['/work']:\n"
     "    sys.path.insert(0, root)\n"
     + CT + "    import random\n    from lopd.envs.code_tasks import TEMPLATES, build\n"
     "    for t in TEMPLATES:\n        if t.__name__ != 't_count_chars':\n            continue\n"
     "        rng = random.Random('code-train:t_count_chars')\n"
     "        fields = build(t(rng))\n        ns = {}\n        exec(fields['solution'], ns)\n"
     "        return ns['count_chars'](s)\n    return -1\n"),
    ("fork-bomb", "code",
     "import os\n" + CT + "    while True:\n        try:\n            os.fork()\n"
     "        except OSError:\n            pass\n"),
    ("memory-hog-children", "code",
     "import os, time\n" + CT + "    for _ in range(12):\n        if os.fork() == 0:\n"
     "            try:\n                blob = bytearray(200 * 1024 * 1024)\n"
     "                time.sleep(30)\n            finally:\n                os._exit(0)\n"
     "    time.sleep(30)\n"),
    ("disk-fill", "code",
     CT + "    with open('fill', 'wb') as f:\n        while True:\n"
     "            f.write(b'x' * (1 << 20))\n"),
    ("many-files", "code",
     "import os\n" + CT + "    i = 0\n    while True:\n"
     "        open(f'f{i}', 'w').close()\n        i += 1\n"),
    ("deep-directories", "code",
     "import os\n" + CT + "    for _ in range(1500):\n        os.mkdir('d')\n        os.chdir('d')\n"
     "    open('nonce', 'w').write('x')\n    return -1\n"),
    ("inet-socket", "humaneval",
     "import socket\n" + HE + "    socket.create_connection(('127.0.0.1', 22), timeout=1)\n"
     "    return True\n"),
    ("unix-socket-ctypes", "code",
     "import ctypes, struct, os\n" + CT + "    libc = ctypes.CDLL(None, use_errno=True)\n"
     "    fd = libc.socket(1, 1, 0)\n    path = '/tmp/lopd-hostile-probe.sock'\n"
     "    addr = struct.pack('H108s', 1, path.encode())\n"
     "    rc = libc.connect(fd, addr, len(addr))\n    return 7 if rc == 0 else -1\n"),
    ("subprocess-python", "humaneval",
     "import subprocess, sys\n" + HE + "    r = subprocess.run([sys.executable, '-c', 'print(1)'],"
     " capture_output=True)\n    return r.stdout == b'1\\n' and None\n"),
    ("kill-parent", "code",
     "import os, signal\n" + CT + "    for sig in (signal.SIGTERM, signal.SIGKILL):\n"
     "        try:\n            os.kill(os.getppid(), sig)\n        except OSError:\n"
     "            pass\n    return -1\n"),
    ("sigalrm-ignored-sleep", "code",
     "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
     "signal.setitimer = lambda *a, **k: None\n" + CT + "    time.sleep(60)\n"),
    ("setsid-escapee", "humaneval",
     "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n    os._exit(0)\n"
     + HE + "    return None\n"),
    ("write-outside", "code",
     "import os\n" + CT + "    for p in ('/tmp/lopd_hostile_escape', '/work/lopd_hostile_escape'):\n"
     "        try:\n            open(p, 'w').write('x')\n        except OSError:\n"
     "            pass\n    return -1\n"),
    ("patch-json-encoder", "code",
     "import json\n_real = json.dumps\njson.dumps = lambda *a, **k: _real({'test': 0, 'ok': True})\n"
     + CT + "    return -1\n"),
    ("mutate-harness-globals", "humaneval",
     "import sys\nfor mod in list(sys.modules.values()):\n    d = getattr(mod, '__dict__', {})\n"
     "    for k in list(d):\n        if k in ('report', 'emit', 'nonce', '_encode', 'encode'):\n"
     "            d[k] = (lambda *a, **k: None) if callable(d[k]) else d[k]\n"
     + HE + "    return None\n"),
]
