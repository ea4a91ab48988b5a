"""JSONL task files: tools from the user's Python, checklists, references, precise errors."""

import json
import textwrap

import pytest

from lopd.envs import load_suite, make_env
from lopd.envs.taskfile import TaskFileError
from lopd.reference import reference_turns

COUNTER = textwrap.dedent('''
    """A tiny counter service (test fixture)."""
    from lopd.envs.function_env import ToolService
    from lopd.tools import ToolError


    class Counters(ToolService):
        description = "a set of named counters"

        def read(self, name: str) -> dict:
            """Read a counter.

            Args:
                name: The counter's name.
            """
            if name not in self.state["counters"]:
                raise ToolError(f"no counter {name}")
            return {"name": name, "value": self.state["counters"][name]}

        def add(self, name: str, amount: int) -> dict:
            """Add to a counter.

            Args:
                name: The counter's name.
                amount: How much to add.
            """
            self.state["counters"][name] += amount
            if amount == 13:
                raise RuntimeError("unlucky")
            return {"value": self.state["counters"][name]}

        def poison(self, name: str) -> dict:
            """Put NaN in a counter."""
            self.state["counters"][name] = float("nan")
            return {}


    def shout(text: str) -> str:
        """Upper-case some text."""
        return text.upper()


    STATELESS = [shout]
''')


def _row(**changes):
    row = {"id": "c-1", "prompt": "Add 5 to counter a.", "toolset": "tools.py:Counters",
           "state": {"counters": {"a": 1, "b": 2}},
           "checks": [{"op": "eq", "path": ["counters", "a"], "value": 6},
                      {"op": "same_except", "path": ["counters"], "value": ["a"], "guard": True}],
           "reference": [{"name": "read", "arguments": {"name": "a"}},
                         {"name": "add", "arguments": {"name": "a", "amount": 5}}]}
    row.update(changes)
    return {k: v for k, v in row.items() if v is not None}


def _write(tmp_path, rows, name="tasks.jsonl"):
    (tmp_path / "tools.py").write_text(COUNTER)
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return str(path)


def _play(task, turns):
    env = make_env(task, max_steps=10)
    env.reset()
    for turn in turns:
        result = env.step(turn)
        if result.done:
            return result, env
    raise AssertionError("episode did not end")


def test_task_file_loads_and_its_reference_succeeds(tmp_path):
    path = _write(tmp_path, [_row(), _row(id="c-2", prompt="Add 5 to a, twice.")])
    tasks = load_suite(path)
    assert [t.id for t in tasks] == ["c-1", "c-2"]
    assert tasks[0].split == "tasks" and tasks[0].domain == "Counters"
    assert [s["name"] for s in tasks[0].tools] == ["read", "add", "poison"]
    assert tasks[0].reference.count("<tool_call>") == 2
    result, _ = _play(tasks[0], reference_turns(tasks[0]))
    assert result.reward == 1.0 and result.info["success"] is True
    assert len(load_suite(path, n=1)) == 1


def test_partial_credit_guards_and_rollback(tmp_path):
    (task,) = load_suite(_write(tmp_path, [_row()]))
    call = '<tool_call>{"name": "add", "arguments": {"name": "%s", "amount": %d}}</tool_call>'
    nothing, _ = _play(task, ["I am done."])
    assert nothing.reward == 0.0  # the guard earns nothing without a goal
    wrong, env = _play(task, [call % ("b", 1), "done"])
    assert wrong.reward == 0.0 and env.service.state["counters"]["b"] == 3
    raised, env = _play(task, [call % ("a", 13), "done"])
    assert env.service.state["counters"]["a"] == 1  # rolled back after the exception
    assert raised.info["errors"] == 1
    env = make_env(task)
    env.reset()
    step = env.step('<tool_call>{"name": "poison", "arguments": {"name": "a"}}</tool_call>')
    assert "non-finite" in step.observation[0]["content"]
    assert env.service.state["counters"]["a"] == 1
    both, env = _play(task, [call % ("a", 5) + call % ("b", 1), "done"])
    assert both.reward == 0.5 and not both.info["success"]


def test_allowed_tools_and_stateless_functions_with_answer_checks(tmp_path):
    rows = [_row(tools=["read"], reference=[{"name": "read", "arguments": {"name": "a"}}]),
            _row(id="s-1", prompt="Shout hi and tell me.", toolset="tools.py:STATELESS",
                 state=None, tools=None,
                 checks=[{"op": "answer_contains", "value": "HI"}],
                 reference=[{"name": "shout", "arguments": {"text": "hi"}}])]
    limited, stateless = load_suite(_write(tmp_path, rows))
    assert [s["name"] for s in limited.tools] == ["read"]
    env = make_env(limited)
    env.reset()
    step = env.step('<tool_call>{"name": "add", "arguments": {"name": "a", "amount": 5}}</tool_call>')
    assert "unknown tool 'add'" in step.observation[0]["content"]
    env = make_env(stateless)
    env.reset()
    env.step('<tool_call>{"name": "shout", "arguments": {"text": "hi"}}</tool_call>')
    assert env.step("It says HI.").reward == 1.0


def test_env_maker_rows(tmp_path):
    (tmp_path / "custom.py").write_text(textwrap.dedent('''
        from lopd.types import ResetResult, StepResult

        class Echo:
            def __init__(self, task, seed=0, max_steps=30):
                self.task = task

            def reset(self):
                return ResetResult([{"role": "user", "content": self.task.prompt}], [])

            def step(self, text):
                return StepResult([], 1.0 if "yes" in text else 0.25, True, {})
    '''))
    row = {"id": "e-1", "prompt": "Say yes.", "env": "custom.py:Echo", "reference": "yes"}
    (task,) = load_suite(_write(tmp_path, [row]))
    assert task.metadata["env"] == "custom"
    env = make_env(task)
    env.reset()
    result = env.step("no")
    assert result.reward == 0.25 and result.info["success"] is False


@pytest.mark.parametrize("line, words", [
    ("{not json", ":2: not valid JSON"),
    (_row(id="c-1"), "task id 'c-1' already on line 1"),
    (_row(id="x", colour="red"), "unknown fields ['colour']"),
    (_row(id="x", prompt=""), "'prompt' must be a non-empty string"),
    (_row(id="x", checks=[]), "'checks' must be a non-empty list"),
    (_row(id="x", checks=[{"op": "near", "path": ["a"]}]), "op 'near'"),
    (_row(id="x", reference=[{"name": "launch", "arguments": {}}]), "unknown tool 'launch'"),
    (_row(id="x", toolset="tools.py:Nope"), "has no attribute 'Nope'"),
    (_row(id="x", toolset="missing.py:Counters"), "no file"),
    (_row(id="x", env="custom.py:Echo"), "exactly one of 'toolset'"),
    (_row(id="x", tools=["fly"]), "unknown tools ['fly']"),
])
def test_bad_rows_name_file_line_and_problem(tmp_path, line, words):
    path = _write(tmp_path, [_row(), line])
    with pytest.raises(TaskFileError) as caught:
        load_suite(path)
    message = str(caught.value)
    assert words in message and "\n" not in message
    if words != ":2: not valid JSON":
        assert message.startswith(f"{path}:2: ")


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(TaskFileError, match="no such file"):
        load_suite(str(tmp_path / "none.jsonl"))
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(TaskFileError, match="no tasks"):
        load_suite(str(tmp_path / "empty.jsonl"))


def test_example_tasks_are_solvable_and_not_solved_by_doing_nothing():
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "examples" / "todo_service" / "data"
    for split in ("train", "test"):
        for task in load_suite(str(data / f"{split}.jsonl")):
            idle, _ = _play(task, ["Done."])
            solved, _ = _play(task, reference_turns(task))
            assert idle.reward == 0.0 and solved.info["success"], task.id
