"""ToolWorld: splits, determinism, reference solutions, baselines, malformed output."""

from __future__ import annotations

import json
import random
import time

import pytest

from lopd.chat import format_tool_call
from lopd.envs import load_suite, make_env
from lopd.envs.toolworld import DOMAINS, TRAIN_DOMAINS, TRANSFER_DOMAINS, ToolWorldEnv, load_tasks
from lopd.envs.toolworld import tasks as tw_tasks
from lopd.envs.toolworld.base import Check, evaluate
from lopd.envs.toolworld.suites import spec_for


def run_reference(task, max_steps=30):
    env = ToolWorldEnv(task, max_steps=max_steps)
    reset = env.reset()
    assert [m["role"] for m in reset.messages] == ["system", "user"]
    assert reset.messages[1]["content"] == task.prompt
    for line in task.reference.splitlines():
        result = env.step(line)
        assert not result.done
        assert len(result.observation) == 1 and result.observation[0]["role"] == "tool"
        assert '"error"' not in result.observation[0]["content"], (task.id, line, result)
    return env.step("All done.")


def test_split_sizes_and_tier_mix():
    train, test, transfer = (load_tasks(s) for s in ("train", "test", "transfer"))
    assert len(train) >= 2000 and len(test) == 200 and len(transfer) >= 100
    for tasks in (train, test, transfer):
        counts = {t: sum(x.metadata["tier"] == t for x in tasks) for t in range(1, 6)}
        for tier, share in tw_tasks.DEFAULT_MIX.items():
            assert abs(counts[tier] - share * len(tasks)) <= len(DOMAINS), counts
    assert {t.domain for t in train} == set(TRAIN_DOMAINS) == {t.domain for t in test}
    assert {t.domain for t in transfer} == set(TRANSFER_DOMAINS)
    assert len(TRAIN_DOMAINS) + len(TRANSFER_DOMAINS) >= 7


def test_splits_disjoint_and_ids():
    train, test, transfer = (load_tasks(s) for s in ("train", "test", "transfer"))
    seeds = [{t.metadata["seed"] for t in tasks} for tasks in (train, test, transfer)]
    assert not (seeds[0] & seeds[1]) and not (seeds[0] & seeds[2]) and not (seeds[1] & seeds[2])
    assert not {t.prompt for t in test} & {t.prompt for t in train}
    ids = [t.id for t in train + test + transfer]
    assert len(ids) == len(set(ids))
    assert train[0].id.startswith("tw-train-") and transfer[0].id == "tw-transfer-smarthome-0"


def test_deterministic_and_fast():
    before = [(t.id, t.prompt, t.reference, t.metadata["seed"]) for t in load_tasks("test")]
    tw_tasks._generate_split.cache_clear()
    start = time.perf_counter()
    train = load_tasks("train")
    elapsed = time.perf_counter() - start
    after = [(t.id, t.prompt, t.reference, t.metadata["seed"]) for t in load_tasks("test")]
    assert before == after and len(train) >= 2000
    assert elapsed < 5.0, f"generating the train split took {elapsed:.1f}s"
    task = train[7]
    one = tw_tasks.generate_spec(task.domain, task.metadata["tier"], task.metadata["seed"])
    two = tw_tasks.generate_spec(task.domain, task.metadata["tier"], task.metadata["seed"])
    assert one.state == two.state and one.goal == two.goal and one.reference == two.reference


def test_filters_and_suites():
    tier1 = load_tasks("train", tiers=[1], domains=["banking"], n=5)
    assert len(tier1) == 5 and all(t.metadata["tier"] == 1 and t.domain == "banking" for t in tier1)
    assert all(len(t.reference.splitlines()) == 1 for t in tier1)
    assert [t.id for t in load_suite("toolworld-test", n=3)] == [t.id for t in load_tasks("test")[:3]]
    first = load_tasks("train", n=6)
    assert {t.domain for t in first} == set(TRAIN_DOMAINS)  # domains are interleaved
    meta = first[0].metadata
    assert {"tier", "domain", "seed", "checks"} <= set(meta) and meta["env"] == "toolworld"
    with pytest.raises(ValueError):
        load_tasks("valid")


def test_tier1_test_split_is_held_out_tier1():
    """``toolworld-test-tier1``: 200 tier-1 tasks from the test seeds, over the six training
    domains, none of whose prompts a training task has (default mix or tier-1 mix); its ids do
    not collide with the plain test split's."""
    tasks = load_suite("toolworld-test-tier1")
    assert len(tasks) == 200 and {t.metadata["tier"] for t in tasks} == {1}
    assert {t.domain for t in tasks} == set(TRAIN_DOMAINS)
    train = {t.prompt for t in load_tasks("train")} | {t.prompt for t in load_tasks("train", mix={1: 1.0})}
    assert not any(t.prompt in train for t in tasks)
    plain = load_tasks("test")
    assert not {t.id for t in tasks} & {t.id for t in plain}
    assert all(t.id.startswith("tw-test-tier1-") and t.split == "test-tier1" for t in tasks)
    # the plain split's tier-1 tasks come from the same seeds, so they are (nearly all) here too
    plain_tier1 = {(t.prompt, t.metadata["seed"]) for t in plain if t.metadata["tier"] == 1}
    here = {(t.prompt, t.metadata["seed"]) for t in tasks}
    assert len(plain_tier1 & here) >= 0.9 * len(plain_tier1)
    env = make_env(tasks[0])
    assert env.reset()


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_reference_solutions_pass(domain):
    tasks = [t for s in ("train", "test", "transfer") for t in load_tasks(s) if t.domain == domain]
    assert {t.metadata["tier"] for t in tasks} == {1, 2, 3, 4, 5}
    for task in tasks:
        result = run_reference(task)
        assert result.done and result.reward == 1.0 and result.info["success"], (task.id, result)
        assert result.info["tool_calls"] == task.metadata["tier"] == len(task.reference.splitlines())
        assert result.info["errors"] == 0 and result.info["steps"] == task.metadata["tier"] + 1


def test_several_calls_in_one_turn_and_make_env():
    for task in load_tasks("test", n=40):
        env = make_env(task, seed=3)
        assert isinstance(env, ToolWorldEnv)
        env.reset()
        result = env.step("Let me do it.\n" + task.reference.replace("\n", " "))
        assert len(result.observation) == task.metadata["tier"]
        assert env.step("Done.").reward == 1.0


def test_empty_policy_scores_zero():
    for task in load_tasks("test"):
        env = make_env(task)
        env.reset()
        result = env.step("I cannot help with that.")
        assert result.done and result.reward == 0.0 and not result.info["success"], task.id
        assert result.info["tool_calls"] == 0 and result.observation == []


def _random_arguments(schema, rng, pool):
    args = {}
    for key, spec in schema["parameters"]["properties"].items():
        kind = spec["type"]
        if kind == "string":
            args[key] = rng.choice(pool)
        elif kind == "integer":
            args[key] = rng.randint(-5, 120)
        elif kind == "number":
            args[key] = round(rng.uniform(0, 500), 2)
        elif kind == "boolean":
            args[key] = rng.random() < 0.5
    return args


def test_random_policy_scores_low():
    rng = random.Random(0)
    rewards, successes = [], 0
    for task in load_tasks("test") + load_tasks("transfer", n=60):
        env = make_env(task)
        env.reset()
        pool = json.dumps(env.spec.state).split('"')[1::2]  # every key and string value
        for _ in range(4):
            tool = rng.choice(env.tools)
            result = env.step(format_tool_call(tool["name"], _random_arguments(tool, rng, pool)))
        result = env.step("done")
        rewards.append(result.reward)
        successes += result.info["success"]
    assert sum(rewards) / len(rewards) < 0.25 and successes / len(rewards) < 0.15


def test_malformed_output_gives_errors_not_crashes():
    task = load_tasks("test", domains=["banking"], tiers=[1])[0]
    env = make_env(task)
    env.reset()
    turn = (
        '<tool_call>{"name": "get_balance", "arguments": {"account_id": 5}}</tool_call>'
        "<tool_call>{not json}</tool_call>"
        '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "deposit", "arguments": {"account_id": "ACC-0000"}}</tool_call>'
        '<tool_call>{"name": "get_balance", "arguments": {"account_id": "ACC-0000"}}</tool_call>'
        '<tool_call>["list"]</tool_call>'
        '<tool_call>{"name": "deposit", "arguments": "oops"}</tool_call>'
        '<tool_call>{"name": "get_balance", "arguments": {"account_id": "x"}'
    )
    result = env.step(turn)
    assert not result.done and len(result.observation) == 8
    contents = [json.loads(m["content"]) for m in result.observation]
    assert all("error" in c for c in contents)
    assert "must be string" in contents[0]["error"] and "unknown tool" in contents[2]["error"]
    assert "missing required argument 'amount'" in contents[3]["error"]
    assert "unknown account" in contents[4]["error"] and "unclosed" in contents[7]["error"]
    assert result.info["tool_calls"] == 1 and result.info["errors"] == 8
    final = env.step("")
    assert final.done and final.reward == 0.0 and final.info["steps"] == 2


def test_invalid_operations_return_error_dicts():
    world = DOMAINS["banking"]({"accounts": {"A": {"owner": "X", "type": "checking",
                                                   "balance": 10.0, "frozen": False}},
                                "transactions": []})
    assert "insufficient funds" in world.call("withdraw", {"account_id": "A", "amount": 50})["error"]
    assert "unknown account" in world.call("get_balance", {"account_id": "B"})["error"]
    world.call("freeze_account", {"account_id": "A"})
    assert "frozen" in world.call("deposit", {"account_id": "A", "amount": 5})["error"]
    assert world.state["accounts"]["A"]["balance"] == 10.0


def test_step_cap_ends_episode():
    task = load_tasks("test", domains=["inventory"], tiers=[3])[0]
    env = make_env(task, max_steps=2)
    env.reset()
    call = format_tool_call("list_low_stock", {"threshold": 5})
    assert not env.step(call).done
    last = env.step(call)
    assert last.done and last.info["truncated"] and last.info["steps"] == 2
    assert env.step(call).done  # stepping after the end is harmless


def test_schemas_explicit_and_guards():
    for cls in DOMAINS.values():
        schemas = cls.schemas()
        assert len(schemas) >= 5
        for schema in schemas:
            assert schema["description"] and schema["parameters"]["type"] == "object"
            for spec in schema["parameters"]["properties"].values():
                assert spec["type"] in ("string", "integer", "number", "boolean") and spec["description"]
    goal = Check("g", "goal", "eq", ("a",), 1)
    guard = Check("h", "guard", "unchanged", ("b",), guard=True)
    assert evaluate([goal, guard], {"a": 0, "b": 1}, {"a": 0, "b": 1}) == [False, False]
    assert evaluate([goal, guard], {"a": 0, "b": 1}, {"a": 1, "b": 1}) == [True, True]
    assert evaluate([goal, guard], {"a": 0, "b": 1}, {"a": 1, "b": 2}) == [True, False]


def test_no_goal_check_passes_before_acting():
    from lopd.envs.toolworld.base import check_passes

    for split in ("train", "test", "transfer"):
        for task in load_tasks(split):
            spec = spec_for(task)
            assert any(not c.guard for c in spec.checks), task.id
            for check in spec.checks:
                if not check.guard:
                    assert not check_passes(check, spec.state, spec.state), (task.id, check)


def test_task_pool_drops_tiers_above_the_cap_and_then_caps_the_count():
    from collections import Counter

    from lopd.config import ConfigError, load_config
    from lopd.envs import task_pool

    every = task_pool("toolworld-train")
    easy = task_pool("toolworld-train", max_tier=2)
    assert Counter(t.metadata["tier"] for t in easy) == Counter(
        t.metadata["tier"] for t in every if t.metadata["tier"] <= 2)
    assert {t.domain for t in easy} == {t.domain for t in every}  # every domain keeps tasks
    assert [t.id for t in task_pool("toolworld-train", max_tasks=5, max_tier=1)] == \
        [t.id for t in every if t.metadata["tier"] == 1][:5]
    assert len(task_pool("toolworld-train", max_tasks=7)) == 7
    with pytest.raises(ConfigError, match="data.train_max_tier"):
        load_config(None, ["data.train_max_tier=-1"])
