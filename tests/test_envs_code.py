"""Code environments and the sandbox: hostile programs are contained and scored as failures."""

from __future__ import annotations

import ast
import os
import time
from pathlib import Path

import pytest

from lopd.envs import load_suite, make_env
from lopd.envs.cleanup import live_processes
from lopd.envs.code import CodeEnv, extract_code, humaneval_program, load_code_tasks
from lopd.envs.sandbox import run_sandboxed

FAST = {"timeout_s": 2.0, "cpu_s": 2}


def assert_contained(result):
    assert result.passed == 0 and result.failed == result.total >= 1
    assert live_processes(result.pid, result.uid) == []


def test_passing_and_partial_credit():
    code = "def f(x):\n    return x * 2\n"
    result = run_sandboxed(code, ["assert f(2) == 4", "assert f(3) == 7", "assert f(0) == 0"])
    assert result.results == [True, False, True] and result.fraction == pytest.approx(2 / 3)
    assert "AssertionError" in result.errors[1] and not result.timed_out
    assert run_sandboxed("x = 1\n").passed == 1  # no tests: the program is the test
    broken = run_sandboxed("def f(:\n", ["assert True"])
    assert broken.passed == 0 and "SyntaxError" in broken.load_error


def test_infinite_loop_times_out():
    start = time.monotonic()
    result = run_sandboxed("while True:\n    pass\n", ["assert True"], **FAST)
    assert result.timed_out or "TimeoutError" in result.load_error
    assert time.monotonic() - start < 6
    assert_contained(result)


def test_infinite_loop_in_one_test_keeps_other_results():
    code = "def f(x):\n    while x:\n        pass\n    return 0\n"
    result = run_sandboxed(code, ["assert f(0) == 0", "assert f(1) == 0", "assert f(0) == 0"],
                           timeout_s=4.0, per_test_timeout_s=1.0)
    assert result.results == [True, False, True]


def test_fork_bomb_is_contained():
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = run_sandboxed(code, ["assert True"], max_procs=8, **FAST)
    assert_contained(result)
    time.sleep(0.2)
    assert live_processes(result.pid, result.uid) == []


def test_escaped_session_is_killed():
    code = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
            "time.sleep(60)\n")
    result = run_sandboxed(code, ["assert True"], timeout_s=1.0, cpu_s=2)
    if result.uid is None:
        pytest.skip("no private uid here: a setsid() escapee is only caught by the uid sweep")
    assert_contained(result)


def test_memory_bomb_fails():
    result = run_sandboxed("blob = bytearray(4 * 1024 ** 3)\n", ["assert True"], memory_mb=256)
    assert "MemoryError" in result.load_error
    assert_contained(result)
    grow = "chunks = []\nwhile True:\n    chunks.append(' ' * 10 ** 7)\n"
    assert_contained(run_sandboxed(grow, ["assert True"], memory_mb=256, **FAST))


def test_writes_outside_the_sandbox_fail(tmp_path):
    target = tmp_path / "escaped.txt"
    os.chmod(tmp_path, 0o777)
    attempts = [
        f"open({str(target)!r}, 'w').write('x')",
        f"import os\nassert os.system('echo x > {target}') == 0",
        "import os\nos.makedirs('/tmp/lopd_sandbox_escape', exist_ok=True)",
    ]
    for code in attempts:
        assert_contained(run_sandboxed(code, ["assert True"], **FAST))
    assert not target.exists() and not Path("/tmp/lopd_sandbox_escape").exists()
    inside = run_sandboxed("open('ok.txt', 'w').write('x')\nassert open('ok.txt').read() == 'x'")
    assert inside.passed == 1  # its own temporary directory is writable


def test_sandbox_directory_is_deleted():
    code = "import os\nopen('marker', 'w').write(os.getcwd())\nprint(os.getcwd())\n"
    result = run_sandboxed(code)
    workdir = result.stdout.strip().splitlines()[-1]
    assert result.passed == 1 and workdir and not Path(workdir).exists()


def test_network_is_disabled():
    code = "import socket\ns = socket.create_connection(('1.1.1.1', 80), timeout=1)\n"
    assert_contained(run_sandboxed(code, ["assert True"], **FAST))
    shell = "import subprocess\nsubprocess.run(['python3', '-c', " \
            "\"import socket; socket.create_connection(('1.1.1.1', 80), timeout=1)\"], check=True)"
    assert_contained(run_sandboxed(shell, ["assert True"], **FAST))


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("LOPD_TEST_SECRET", "hunter2")
    probe = "import os\nassert 'hunter2' in os.environ.get('LOPD_TEST_SECRET', '')\n"
    assert_contained(run_sandboxed(probe, ["assert True"]))
    parent = ("import os\ndata = open(f'/proc/{os.getppid()}/environ', 'rb').read()\n"
              "assert b'hunter2' in data\n")
    result = run_sandboxed(parent, ["assert True"])
    if result.uid is not None:
        assert_contained(result)
    env = run_sandboxed("import os\nprint(sorted(os.environ))\n")
    names = ast.literal_eval(env.stdout.strip().splitlines()[-1])
    allowed = {"HOME", "LANG", "PATH", "LC_CTYPE", "TMPDIR"}
    assert {"HOME", "LANG", "PATH"} <= set(names) <= allowed


def test_results_cannot_be_forged():
    forged = "import os\nprint('0' * 32 + ' {\"test\": 0, \"ok\": true}')\nos._exit(0)\n"
    assert_contained(run_sandboxed(forged, ["assert False"]))
    early_exit = "import sys\nsys.exit(0)\n"
    assert_contained(run_sandboxed(early_exit, ["assert True"]))


def test_extract_code():
    assert extract_code("```python\na = 1\n```\ntext\n```python\nb = 2\n```") == "b = 2"
    assert extract_code("```\nc = 3\n```") == "c = 3"
    assert extract_code("def f():\n    return 1") == "def f():\n    return 1"
    assert extract_code("```python\nunterminated = 1\n") == "unterminated = 1"


def test_generated_tasks_and_references():
    tasks = load_code_tasks()
    assert len(tasks) >= 200 and len({t.id for t in tasks}) == len(tasks)
    assert [t.id for t in load_code_tasks()] == [t.id for t in tasks]
    assert load_suite("code-train", n=5)[0].id == tasks[0].id
    for task in tasks[::9]:
        env = make_env(task)
        reset = env.reset()
        assert reset.tools == [] and reset.messages[1]["content"] == task.prompt
        result = env.step("Here it is:\n" + task.reference)
        assert result.done and result.reward == 1.0 and result.info["success"], task.id
        assert result.info["total"] == len(task.metadata["tests"]) >= 3


def test_wrong_code_scores_low():
    task = load_code_tasks()[0]
    env = CodeEnv(task)
    env.reset()
    wrong = f"```python\ndef {task.metadata['entry_point']}(*args):\n    return None\n```"
    assert env.step(wrong).reward < 0.5
    env = CodeEnv(task)
    env.reset()
    result = env.step("I do not know.")
    assert result.reward == 0.0 and not result.info["success"] and result.info["errors"] == 1


def test_humaneval_canonical_solutions_pass():
    tasks = load_suite("humaneval")
    assert len(tasks) == 164
    for task in tasks[::16]:
        env = make_env(task)
        env.reset()
        result = env.step(task.reference)
        assert result.reward == 1.0 and result.info["success"], (task.id, result.info)


def test_humaneval_body_only_and_wrong_answers():
    task = load_suite("humaneval", n=3)[2]  # truncate_number
    body = "    return number % 1.0\n"
    assert make_env(task).step(body).reward == 1.0
    program = humaneval_program(task.metadata["stub"], "return number % 1.0", "truncate_number")
    assert "    return number % 1.0" in program
    wrong = "```python\ndef truncate_number(number):\n    return 0.0\n```"
    assert make_env(task).step(wrong).reward == 0.0


@pytest.mark.parametrize("suite", ["code-train", "humaneval"])
def test_reference_trajectory_solves_code_tasks(suite):
    """Fenced or bare reference programs replay as one fenced turn that passes the tests
    (a double fence once made every code seed experience fail)."""
    from lopd.chat import ChatRenderer
    from lopd.models import load_tokenizer
    from lopd.reference import reference_trajectory

    renderer = ChatRenderer(load_tokenizer("tiny-random"))
    for task in load_suite(suite, n=2):
        traj = reference_trajectory(task, renderer)
        assert traj.success and traj.reward == 1.0, task.id
