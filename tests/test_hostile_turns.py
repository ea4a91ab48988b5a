"""Bounded cost per turn: a hostile turn of 10,000 tool calls (1,000,000 characters) is handled
in well under a second by every tool environment (ToolWorld, function tools, a plugin's checked
env, BFCL, ACEBench); calls past the cap are not executed and the observation says so;
observations are cut in one place; the journal that replaced per-call state copies undoes
exactly what a failed call changed.

Timing asserts leave wide margins (1 s; the measured turns take a few milliseconds)."""

from __future__ import annotations

import copy
import json
import random
import time
from collections import defaultdict

import pytest

from lopd.chat import MAX_TURN_CHARS, parse_tool_calls
from lopd.config import Config, ConfigError, validate
from lopd.envs import make_env
from lopd.envs.common import MAX_CALLS_PER_TURN, MAX_OBSERVATION_CHARS, tool_message
from lopd.envs.function_env import FunctionEnv, ToolService, tool_task
from lopd.envs.journal import Journal, track
from lopd.envs.plugins import PluginSuite, build_env
from lopd.envs.toolworld import load_tasks
from lopd.rollout import RolloutConfig
from lopd.types import ResetResult, StepResult, Task

CALLS, CHARS = 10_000, 1_000_000


def hostile_turn(name: str, arguments: dict) -> str:
    """``CALLS`` copies of one call, padded to exactly ``CHARS`` characters."""
    block = f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'
    width = CHARS // CALLS
    assert len(block) <= width
    return (block + " " * (width - len(block))) * CALLS


def timed_step(env, text: str) -> tuple[StepResult, float]:
    assert len(text) == CHARS
    start = time.perf_counter()
    result = env.step(text)
    return result, time.perf_counter() - start


def assert_capped(result: StepResult, cap: int = MAX_CALLS_PER_TURN) -> None:
    assert not result.done and len(result.observation) == cap + 1
    note = result.observation[-1]["content"]
    assert f"only the first {MAX_TURN_CHARS} were read" in note
    assert f"at most {cap} tool calls are executed per turn" in note


def banking_env(**limits):
    task = next(t for t in load_tasks("train") if t.metadata["domain"] == "banking")
    env = make_env(task, max_steps=100, **limits)
    env.reset()
    return env, min(env.world.state["accounts"])


# -- one enormous turn, every environment ------------------------------------------------------

def test_toolworld_turn_of_ten_thousand_withdrawals():
    env, account = banking_env()
    balance = env.world.state["accounts"][account]["balance"]
    result, seconds = timed_step(env, hostile_turn("withdraw", {"account_id": account,
                                                                "amount": 0.01}))
    assert seconds < 1.0
    assert_capped(result)
    assert env.world.state["accounts"][account]["balance"] == pytest.approx(balance - 0.20)
    assert len(env.world.state["transactions"]) == MAX_CALLS_PER_TURN
    assert env.world.state_problems() == []


class Ledger(ToolService):
    """A log that only grows (the shape that made per-call state copies quadratic)."""

    description = "a ledger"

    def record(self, amount: int) -> dict:
        """Append an amount to the ledger.

        Args:
            amount: the amount to record.
        """
        self.state.setdefault("rows", []).append({"amount": amount})
        return {"rows": len(self.state["rows"])}

    def echo(self, text: str) -> str:
        """Return the text as it was given.

        Args:
            text: any text.
        """
        return text * 100


def ledger_env(**limits) -> FunctionEnv:
    task = tool_task("ledger", "Record 5.", "tests:Ledger", state={"rows": []},
                     checks=[{"op": "count", "path": ["rows"], "value": 1}],
                     toolset_object=Ledger)
    env = FunctionEnv(task, Ledger, max_steps=100, **limits)
    env.reset()
    return env


def test_function_env_turn_of_ten_thousand_calls():
    env = ledger_env()
    result, seconds = timed_step(env, hostile_turn("record", {"amount": 5}))
    assert seconds < 1.0
    assert_capped(result)
    assert len(env.service.state["rows"]) == MAX_CALLS_PER_TURN


class NaiveEnv:
    """A user's environment that runs every call it is given, with no cap of its own."""

    def __init__(self, task: Task):
        self.task, self.calls = task, 0

    def reset(self) -> ResetResult:
        return ResetResult([{"role": "user", "content": "go"}], [])

    def step(self, text: str) -> StepResult:
        calls = parse_tool_calls(text).calls
        self.calls += len(calls)
        observation = [{"role": "tool", "content": "ok " * 20_000} for _ in calls]
        return StepResult(observation, 0.0, not calls, {})


def test_plugin_checked_env_turn_of_ten_thousand_calls():
    task = Task(id="naive", split="train", domain="naive", prompt="go", tools=[], reference="",
                metadata={"env": "plugin"})
    env = build_env(PluginSuite([task], NaiveEnv), "tests:naive", task, seed=0, max_steps=30)
    env.reset()
    result, seconds = timed_step(env, hostile_turn("anything", {"k": 1}))
    assert seconds < 1.0
    assert_capped(result)
    assert env.env.calls == MAX_CALLS_PER_TURN
    assert all(len(m["content"]) < MAX_OBSERVATION_CHARS + 40 for m in result.observation)


def test_bfcl_turn_of_ten_thousand_calls():
    pytest.importorskip("bfcl_eval")
    from lopd.envs.bfcl import load_bfcl_tasks

    env = make_env(load_bfcl_tasks("base", n=1)[0], max_steps=30)
    env.reset()
    result, seconds = timed_step(env, hostile_turn("pwd", {}))
    assert seconds < 1.0
    assert_capped(result)
    assert env.tool_calls == MAX_CALLS_PER_TURN and not env.force_quit


def test_acebench_turn_of_ten_thousand_calls():
    from lopd.envs.acebench.env import load_acebench_tasks

    env = make_env(load_acebench_tasks(n=1)[0], max_steps=30)
    env.reset()
    result, seconds = timed_step(env, hostile_turn("turn_on_wifi", {}))
    assert seconds < 1.0
    assert_capped(result)
    assert env.tool_calls == MAX_CALLS_PER_TURN


# -- the caps ----------------------------------------------------------------------------------

def test_the_cap_comes_from_the_config_and_calls_past_it_do_not_run():
    assert RolloutConfig().max_calls_per_turn == MAX_CALLS_PER_TURN == 20
    config = Config()
    config.rollout.max_calls_per_turn = 0
    with pytest.raises(ConfigError, match="max_calls_per_turn"):
        validate(config)
    env, account = banking_env(max_calls=3)
    block = f'<tool_call>{json.dumps({"name": "deposit", "arguments": {"account_id": account, "amount": 1}})}</tool_call>'
    before = env.world.state["accounts"][account]["balance"]
    result = env.step("\n".join([block] * 5) + "\nand an answer")
    assert len(result.observation) == 4 and env.tool_calls == 3 and env.errors == 1
    assert "the other 2 were not executed" in result.observation[-1]["content"]
    assert env.world.state["accounts"][account]["balance"] == before + 3
    result = env.step("\n".join([block] * 3))  # at the cap: no note
    assert len(result.observation) == 3 and env.errors == 1


def test_observations_are_cut_in_one_place():
    content = tool_message("x" * CHARS)["content"]
    assert len(content) <= MAX_OBSERVATION_CHARS + 40 and content.endswith(f"[{CHARS} chars]")
    env = ledger_env()
    result = env.step('<tool_call>{"name": "echo", "arguments": {"text": "' + "y" * 5000
                      + '"}}</tool_call>')
    assert len(result.observation[0]["content"]) <= MAX_OBSERVATION_CHARS + 40


def test_the_parser_reads_at_most_max_turn_chars():
    call = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    assert len(parse_tool_calls("x" * (MAX_TURN_CHARS - len(call)) + call).calls) == 1
    turn = parse_tool_calls("x" * MAX_TURN_CHARS + call)
    assert turn.calls == [] and len(turn.content) == MAX_TURN_CHARS


# -- the journal -------------------------------------------------------------------------------

def _mutate(rng: random.Random, state: dict) -> None:
    """One random mutation of a nested dict/list state, by any of the container methods."""
    rows, table = state["rows"], state["table"]
    key = rng.choice(["a", "b", "c", "new"])
    op = rng.randrange(17)
    if op == 0:
        rows.append({"v": rng.random(), "tags": []})
    elif op == 1:
        rows.extend([1, 2])
    elif op == 2 and rows:
        rows.pop()
    elif op == 3 and rows:
        rows.pop(0)
    elif op == 4:
        rows.insert(0, "first")
    elif op == 5:
        rows.sort(key=repr)
    elif op == 6:
        rows.reverse()
    elif op == 7 and rows:
        rows[rng.randrange(len(rows))] = {"replaced": True}
    elif op == 8 and len(rows) > 1:
        del rows[:1]
    elif op == 9:
        table[key] = {"x": [rng.random()]}
    elif op == 10 and key in table:
        del table[key]
    elif op == 11:
        table.update({key: 1, "z": 2})
    elif op == 12:
        table.setdefault("list", []).append(3)
    elif op == 13:
        table.pop(key, None)
    elif op == 14 and table:
        node = table[rng.choice(sorted(table))]
        if isinstance(node, dict):
            node["deep"] = rng.random()
        elif isinstance(node, list):
            node.append("deep")
    elif op == 15:
        state["rows"] += ["added"]
    elif op == 16 and rows and isinstance(rows[-1], dict):  # a row stored by an earlier call
        rows[-1]["v"] = rng.random()
        rows[-1].setdefault("tags", []).append("t")


def test_the_journal_undoes_exactly_what_a_call_changed():
    rng = random.Random(0)
    journal = Journal()
    state = track({"rows": [{"v": 1.0, "tags": ["t"]}], "table": {"a": {"x": [1]}, "b": [2]}},
                  journal)
    for _ in range(300):
        before = copy.deepcopy(state)
        journal.begin()
        for _ in range(rng.randrange(1, 6)):
            _mutate(rng, state)
        if rng.random() < 0.5:
            journal.undo()
            assert state == before
        else:
            assert journal.commit() == []
            assert json.loads(json.dumps(state)) == state  # still plain JSON data
    assert type(copy.deepcopy(state)) is dict and type(copy.copy(state["rows"])) is list
    kept = track({"counts": defaultdict(int)}, journal)["counts"]
    assert type(kept) is defaultdict and kept["new"] == 0  # subclasses keep their behaviour


def test_the_journal_reports_non_finite_values_written():
    journal = Journal()
    state = track({"a": {"b": 1.0}, "log": []}, journal)
    journal.begin()
    state["a"]["b"] = float("nan")
    state["log"].append({"x": [float("inf")]})
    assert sorted(map(str, journal.commit())) == ["('b',)", "(0, 'x', 0)"]
    journal.undo()
    assert state == {"a": {"b": 1.0}, "log": []}


def test_changes_made_outside_a_call_are_still_undone_later():
    from lopd.envs.toolworld.banking import Banking
    from lopd.envs.toolworld.base import Param, tool

    class Crashing(Banking):
        @tool("Change a balance, then crash.", account_id=Param("string", "Account id."))
        def crash(self, account_id):
            self.state["accounts"][account_id]["balance"] = 1.0
            self.state["accounts"][account_id].setdefault("notes", []).append("half-done")
            raise RuntimeError("boom")

    world = Crashing(banking_env()[0].world.state)
    world.state["accounts"]["ACC-0000"] = {"owner": "X", "type": "checking", "balance": 5.0,
                                           "frozen": False}  # a plain dict, stored outside a call
    for domain in (world, copy.deepcopy(world)):  # the copy's state is plain throughout
        before = copy.deepcopy(domain.state)
        assert "boom" in domain.call("crash", {"account_id": "ACC-0000"})["error"]
        assert domain.state == before
        assert domain.call("withdraw", {"account_id": "ACC-0000", "amount": 5.0})["balance"] == 0
        assert "boom" in domain.call("crash", {"account_id": "ACC-0000"})["error"]
        assert domain.state["accounts"]["ACC-0000"] == {**before["accounts"]["ACC-0000"],
                                                        "balance": 0.0}
