"""BFCL multi-turn: ground truth scores full marks with BFCL's own checker; bad output is safe."""

from __future__ import annotations

import json

import pytest

from lopd.chat import format_tool_call
from lopd.envs import load_suite, make_env
from lopd.envs.bfcl import CATEGORIES, BFCLEnv, _bfcl, ground_truth_turns, load_bfcl_tasks


def play_ground_truth(env: BFCLEnv):
    """Each user turn: all ground-truth calls in one message, then a message without calls."""
    env.reset()
    result = None
    for turn in ground_truth_turns(env.task.id):
        if turn:
            result = env.step("".join(format_tool_call(name, args) for name, args in turn))
            assert not result.done, result.info
            assert not any(m["content"].startswith('{"error"') for m in result.observation)
        result = env.step("Done with this request.")
    return result


def cached_instances() -> list[str]:
    return [k for k in vars(_bfcl()[-1]) if k.startswith("lopd_")]


def test_task_loading():
    for category in CATEGORIES:
        tasks = load_bfcl_tasks(category)
        assert len(tasks) == 200 and tasks[0].id == f"multi_turn_{category}_0"
        assert tasks[0].metadata["env"] == "bfcl" and tasks[0].tools
    assert len(load_suite("bfcl-multi-turn", n=2)) == 8
    assert [t.id for t in load_suite("bfcl-miss_param", n=3)] == [
        f"multi_turn_miss_param_{i}" for i in range(3)]
    schema = next(t for t in load_bfcl_tasks("base", n=1)[0].tools if t["name"] == "cd")
    assert schema["parameters"]["type"] == "object"
    assert schema["description"].endswith("Note that the provided function is in Python 3 syntax.")


@pytest.mark.parametrize("category", CATEGORIES)
def test_ground_truth_scores_full_marks(category):
    tasks = load_bfcl_tasks(category)[::5]
    for task in tasks:
        env = make_env(task)
        assert isinstance(env, BFCLEnv)
        result = play_ground_truth(env)
        assert result.done and result.reward == 1.0 and result.info["success"], (task.id, result.info)
    assert cached_instances() == []


def test_empty_policy_fails_and_turns_advance():
    for task in load_bfcl_tasks("base", n=10):
        env = make_env(task)
        reset = env.reset()
        assert [m["role"] for m in reset.messages] == ["system", "user"]
        turns = task.metadata["turns"]
        for index in range(turns):
            result = env.step("I am not sure how to help.")
            if index < turns - 1:
                assert not result.done and [m["role"] for m in result.observation] == ["user"]
        assert result.done and result.reward == 0.0 and not result.info["success"]
        assert result.info["error_type"] == "multi_turn:empty_turn_model_response"


def test_miss_func_adds_functions_at_their_turn():
    task = load_bfcl_tasks("miss_func", n=1)[0]
    env = make_env(task)
    env.reset()
    held_out = [t["name"] for t in task.tools]
    assert "sort" not in held_out  # sort is held out until turn 3 in entry 0
    bad = env.step(format_tool_call("no_such_tool", {}))
    assert "sort" not in json.loads(bad.observation[0]["content"])["error"]
    observations = []
    for _ in range(4):
        result = env.step("ok")
        observations.append(result)
    added = observations[2]
    assert "sort" in [t["name"] for t in added.info["tools"]]
    assert "I have updated some more functions" in added.observation[-1]["content"]
    assert '"name":"sort"' in added.observation[-1]["content"]


def test_malformed_and_hostile_calls_are_rejected():
    task = load_bfcl_tasks("base", n=1)[0]
    env = make_env(task)
    env.reset()
    turn = (
        "<tool_call>{bad json}</tool_call>"
        '<tool_call>{"name": "__import__", "arguments": {"name": "os"}}</tool_call>'
        '<tool_call>{"name": "cd", "arguments": {"folder=1);print(1);(x": 1}}</tool_call>'
        '<tool_call>{"name": "_load_scenario", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "cd", "arguments": {"folder": "document"}}</tool_call>'
        '<tool_call>{"name": "ls", "arguments": {"a": "yes please"}}</tool_call>'
    )
    result = env.step(turn)
    assert not result.done and len(result.observation) == 6
    contents = [m["content"] for m in result.observation]
    assert all(json.loads(c).get("error") for c in contents[:4])
    assert "document" in contents[4] and result.info["tool_calls"] == 2
    assert result.info["errors"] == 4


def test_more_than_twenty_call_steps_force_quit():
    task = load_bfcl_tasks("base", n=1)[0]
    env = make_env(task, max_steps=50)
    env.reset()
    call = format_tool_call("pwd", {})
    for step in range(21):
        result = env.step(call)
        if step < 20:
            assert not result.done
    assert result.done and result.reward == 0.0 and result.info["force_quit"]
    assert cached_instances() == []


def test_max_steps_moves_to_next_turn():
    task = load_bfcl_tasks("base", n=1)[0]
    env = make_env(task, max_steps=2)
    env.reset()
    call = format_tool_call("pwd", {})
    assert not env.step(call).done
    result = env.step(call)
    assert not result.done and result.observation[-1]["role"] == "user"
    assert result.observation[0]["role"] == "tool" and result.info["turn"] == 1


def test_episodes_are_independent_and_deterministic():
    task = load_bfcl_tasks("base", n=1)[0]
    first, second = make_env(task), make_env(task)
    first.reset()
    second.reset()
    call = format_tool_call("cd", {"folder": "document"})
    assert first.step(call).observation == second.step(call).observation
    again = first.step(format_tool_call("pwd", {}))
    other = second.step(format_tool_call("pwd", {}))
    assert again.observation == other.observation
    assert "document" in again.observation[0]["content"]
