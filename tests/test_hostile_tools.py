"""Hostile model output: tool-call parsing and every ToolWorld tool turn it into error
observations, never exceptions, never a corrupted state, always text that renders."""

from __future__ import annotations

import copy
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lopd.chat import ChatRenderer, parse_tool_calls, safe_text
from lopd.envs.common import compact, error_message, tool_message
from lopd.envs.toolworld import DOMAINS, ToolWorldEnv, load_tasks
from lopd.envs.toolworld.fuzz import run_fuzz

_TASKS = {}


def world_env(domain: str, tier: int = 3) -> ToolWorldEnv:
    """A reset episode of the first train/transfer task of ``domain`` and ``tier``."""
    if not _TASKS:
        for split in ("train", "transfer"):
            for task in load_tasks(split):
                _TASKS.setdefault((task.metadata["domain"], task.metadata["tier"]), task)
    env = ToolWorldEnv(_TASKS[(domain, tier)], max_steps=1000)
    env.reset()
    return env


@pytest.fixture(scope="module")
def renderer(smol_tokenizer):
    return ChatRenderer(smol_tokenizer)


def call(name: str, arguments) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def step_one(env: ToolWorldEnv, text: str) -> str:
    """Content of the single observation of a one-call turn (checks it is valid text)."""
    result = env.step(text)
    assert len(result.observation) == 1, result
    content = result.observation[0]["content"]
    content.encode("utf-8")  # valid Unicode: the tokenizer accepts it
    return content


def first_id(env: ToolWorldEnv, collection: str) -> str:
    return min(env.world.state[collection])


# -- hypothesis fuzz ---------------------------------------------------------------------------

_SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])
_TEXT = st.lists(st.characters() | _SURROGATES, max_size=12).map("".join)
_NUMBERS = (st.integers(min_value=-(10**40), max_value=10**40) | st.floats()
            | st.sampled_from([10**200, -(10**150), float("nan"), float("inf"), -0.0, 1e308]))
_JSON = st.recursive(st.none() | st.booleans() | _NUMBERS | _TEXT,
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=8)
_RAW = st.sampled_from(["NaN", "-Infinity", "1e309", "9" * 5000, "1" * 101, "[" * 3000,
                        "{" * 50 + "}" * 50, "-0", "1e-400", '"\\ud800"', "0x1F", ""])


@st.composite
def hostile_turns(draw):
    domain = draw(st.sampled_from(sorted(DOMAINS)))
    schemas = DOMAINS[domain].schemas()
    schema = draw(st.sampled_from(schemas))
    keys = list(schema["parameters"]["properties"]) + ["a.b", "null", ""]
    arguments = draw(st.dictionaries(st.sampled_from(keys) | _TEXT, _JSON, max_size=4) | _JSON)
    name = draw(st.sampled_from([s["name"] for s in schemas]) | _JSON)
    text = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):  # a literal json.dumps never writes, in place of the arguments
        text = text.replace('"arguments": ', '"arguments": {"x": ' + draw(_RAW) + "}, \"y\": ", 1)
    close = draw(st.sampled_from(["</tool_call>", "</tool_call>", ""]))
    return domain, draw(_TEXT) + "<tool_call>" + text + close


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(turns=st.lists(hostile_turns(), min_size=1, max_size=3))
def test_fuzzed_turns_never_raise_corrupt_or_break_rendering(renderer, turns):
    for domain, text in turns:
        env = world_env(domain, tier=1)
        result = env.step(text)
        for message in result.observation:
            message["content"].encode("utf-8")
            renderer.render_message(message)
        assert env.world.state_problems() == []
        assert parse_tool_calls(text).attempted_calls >= 0  # schema-free parsing (BFCL)


def test_seeded_fuzz_run_finds_nothing():
    report = run_fuzz(steps=1500, seed=7)
    assert report.steps == 1500 and report.failures == 0, report.examples
    assert report.calls_ok > 100  # the run does reach the tools, not only the parser


def test_fuzz_with_many_calls_turns_stays_fast():
    """A fifth of the 20,000-turn run (22 to 51 s with rendering on 2 cores shared with other
    jobs; the bound is 2 minutes), many_calls turns included, at a fifth of the bound."""
    report = run_fuzz(steps=4000, seed=3)
    assert report.steps == 4000 and report.failures == 0, report.examples
    assert report.seconds < 24 and report.slowest_step < 1.0


@pytest.mark.slow
def test_twenty_thousand_fuzzed_steps_raise_nothing(renderer):
    report = run_fuzz(steps=20_000, seed=0, renderer=renderer)
    assert report.steps == 20_000 and report.failures == 0, report.examples
    assert report.seconds < 120


# -- parsing -----------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, expected", [
    ('{"name": "f", "arguments": ' + "[" * 1000 + "]" * 1000 + "}", "nested more than"),
    ('{"name": "f", "arguments": ' + "[" * 90_000 + "}", "nested more than"),
    ('{"name": "f", "arguments": ' + "{\"a\": " * 40 + "1" + "}" * 40 + "}", "nested more than"),
    ('{"name": "f", "arguments": {"n": ' + "7" * 5000 + "}}", "too long"),
    ('{"name": "f", "arguments": {"n": -' + "7" * 101 + "}}", "too long"),
    ('{"name": "f", "arguments": {"n": 1e309}}', "out of range"),
    ('{"name": "f", "arguments": {"n": -2e308}}', "out of range"),
    ('{"name": "f", "arguments": {"n": NaN}}', "not a valid JSON number"),
    ('{"name": "f", "arguments": {"n": -Infinity}}', "not a valid JSON number"),
    ('{"name": "f", "arguments": {"n": [1, Infinity]}}', "not a valid JSON number"),
])
def test_parser_refuses_what_would_crash_or_poison(raw, expected):
    turn = parse_tool_calls(f"<tool_call>{raw}</tool_call>")
    assert not turn.calls and len(turn.errors) == 1 and expected in turn.errors[0]
    assert len(turn.errors[0]) < 400


def test_parser_keeps_ordinary_numbers():
    turn = parse_tool_calls('<tool_call>{"name": "f", "arguments": {"a": 1e308, "b": -0.0, '
                            '"c": 1e-400, "d": ' + "9" * 100 + "}}</tool_call>")
    assert not turn.errors
    args = turn.calls[0].arguments
    assert args["a"] == 1e308 and math.copysign(1, args["b"]) == -1 and args["c"] == 0.0
    assert args["d"] == int("9" * 100)


def test_non_string_input_and_huge_names_are_errors():
    assert parse_tool_calls(None).calls == []  # type: ignore[arg-type]
    tools = DOMAINS["banking"].schemas()
    turn = parse_tool_calls(call("x" * 90_000, {}), tools)  # within MAX_TURN_CHARS
    assert "unknown tool" in turn.errors[0] and len(turn.errors[0]) < 400
    turn = parse_tool_calls(call("get_balance", {"k" * 90_000: 1}), tools)
    assert "unknown argument" in turn.errors[0] and len(turn.errors[0]) < 400


# -- rendering ---------------------------------------------------------------------------------

def test_safe_text_repairs_only_invalid_text():
    assert safe_text("plain é 😀") == "plain é 😀"
    assert safe_text("a\ud800b") == "a\ufffdb"
    assert safe_text("\ud83d\ude00") == "😀"  # a split surrogate pair is joined
    assert safe_text("\udfff\ud800") == "\ufffd\ufffd"


def test_every_observation_renders(renderer):
    for content in ["\ud800", "x\udfffy", "\x00\x1b[2J\u202e", "\ud83d\ude00", "A" * 10_000]:
        for message in (tool_message({"echo": content}), error_message(content),
                        {"role": "assistant", "content": content},
                        {"role": "user", "content": content}):
            ids, mask = renderer.render_message(message)
            assert ids and len(ids) == len(mask)


def test_observation_serialisation_never_raises():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert compact(deep).startswith("<unprintable") or compact(deep).startswith("[")
    assert compact({"x": float("nan")}) == '{"x":NaN}'
    assert compact({1, 2}).startswith("{")  # not JSON: printed
    assert len(error_message("e" * 1_000_000)["content"]) < 1200


# -- ToolWorld tools ---------------------------------------------------------------------------

@pytest.mark.parametrize("amount", [
    "NaN", "Infinity", "-Infinity", "1e309", "1e400", "9" * 4400, "1" * 150,
    "0", "-0.0", "-5", "0.001", "1e10", "true", "\"12\"", "[12]", "null", "{}",
])
def test_banking_refuses_bad_amounts_and_keeps_its_state(amount):
    env = world_env("banking")
    account = first_id(env, "accounts")
    before = copy.deepcopy(env.world.state)
    for tool, extra in (("deposit", {"account_id": account}),
                        ("withdraw", {"account_id": account}),
                        ("transfer", {"from_account": account, "to_account": account})):
        text = call(tool, {**extra, "amount": 1}).replace('"amount": 1', f'"amount": {amount}')
        assert '"error"' in step_one(env, text)
    assert env.world.state == before


def test_inventory_refuses_bad_prices_and_quantities():
    env = world_env("inventory")
    sku = first_id(env, "items")
    before = copy.deepcopy(env.world.state)
    for text in [call("set_price", {"sku": sku, "price": 1}).replace('"price": 1', '"price": NaN'),
                 call("set_price", {"sku": sku, "price": 1e308}),
                 call("set_price", {"sku": sku, "price": 0.001}),
                 call("adjust_stock", {"sku": sku, "delta": 10**30}),
                 call("adjust_stock", {"sku": sku, "delta": 1.5}),
                 call("adjust_stock", {"sku": sku, "delta": True}),
                 call("list_low_stock", {"threshold": -(10**30)}),
                 call("move_item", {"sku": sku, "location": "b3"})]:
        assert '"error"' in step_one(env, text), text
    assert env.world.state == before
    assert "must be greater than 0" in step_one(env, call("set_price", {"sku": sku, "price": -0.0}))


def test_calendar_times_and_dates_stay_valid():
    env = world_env("calendar")
    event_id = first_id(env, "events")
    date = env.world.state["events"][event_id]["date"]
    before = copy.deepcopy(env.world.state)
    late = step_one(env, call("move_event", {"event_id": event_id, "date": "2025-03-20",
                                             "start": "23:59"}))
    assert "after 23:59" in late
    for start in ["24:00", "9:00", "09:00\n", "٠٩:٠٠", "12:60", "", "12:00:00"]:
        out = step_one(env, call("move_event", {"event_id": event_id, "date": date,
                                                "start": start}))
        assert "bad time" in out, (start, out)
    for bad_date in ["2025-02-30", "2025-13-01", "２０２５-03-10", "2025-03-10\n", "10/03/2025"]:
        out = step_one(env, call("create_event", {"title": "t", "date": bad_date,
                                                  "start": "10:00", "end": "10:30"}))
        assert "bad date" in out, (bad_date, out)
    for duration in [0, -30, 10**6]:
        out = step_one(env, call("find_free_slot", {"date": date, "duration_minutes": duration}))
        assert '"error"' in out
    assert env.world.state == before


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_malformed_calls_on_every_tool_are_errors(domain, renderer):
    env = world_env(domain)
    before = copy.deepcopy(env.world.state)
    for schema in env.tools:
        name, props = schema["name"], schema["parameters"]["properties"]
        wrong = [[], "x", 7, [None], {**{k: None for k in props}, "a.b": 1}, {"null": "null"},
                 {k: "A" * 20_000 for k in props}, {k: [k] for k in props},
                 {k: {"$ref": k} for k in props}]
        for arguments in wrong:
            if not props and arguments == {}:
                continue  # a valid call of a tool without arguments
            content = step_one(env, call(name, arguments))
            assert '"error"' in content and len(content) < 3000, (name, arguments, content[:200])
        odd = {k: "\ud800\x00\u202e" for k in props}  # may be a valid (if useless) call
        renderer.render_message(env.step(call(name, odd)).observation[0])
    assert env.world.state == before or env.world.state_problems() == []


@pytest.mark.parametrize("name", ["__init__", "_lookup", "call", "state", "generate",
                                  "schemas", "tool_methods", "domain_problems", "GET_BALANCE"])
def test_only_declared_tools_are_callable(name):
    env = world_env("banking")
    assert "unknown tool" in step_one(env, call(name, {}))
    assert "unknown tool" in env.world.call(name, {})["error"]


def test_direct_calls_bypassing_the_parser_are_checked_too():
    world = world_env("banking").world
    account = min(world.state["accounts"])
    before = copy.deepcopy(world.state)
    for arguments in [{"account_id": account, "amount": float("nan")},
                      {"account_id": account, "amount": float("inf")},
                      {"account_id": account, "amount": 10**5000},
                      {"account_id": account}, [account, 5], None]:
        assert "error" in world.call("deposit", arguments)
    assert "error" in world.call(["deposit"], {})  # unhashable name
    assert world.state == before


def test_a_tool_that_crashes_or_corrupts_is_rolled_back():
    from lopd.envs.toolworld.banking import Banking
    from lopd.envs.toolworld.base import Param, tool

    class Broken(Banking):
        @tool("Crash half-way.", account_id=Param("string", "Account id."))
        def crash(self, account_id):
            self.state["accounts"][account_id]["balance"] = -1.0
            raise RuntimeError("boom")

        @tool("Leave a NaN balance.", account_id=Param("string", "Account id."))
        def poison(self, account_id):
            self.state["accounts"][account_id]["balance"] = float("nan")
            return {"ok": True}

    state = world_env("banking").world.state
    world = Broken(state)
    account = min(state["accounts"])
    assert world.call("crash", {"account_id": account}) == {"error": "crash: RuntimeError: boom"}
    error = world.call("poison", {"account_id": account})["error"]
    assert "invalid state" in error and "non-finite" in error
    assert world.state == state


@pytest.mark.parametrize("domain, corrupt, expected", [
    ("banking", lambda s: s["accounts"][min(s["accounts"])].update(balance=float("nan")),
     "non-finite"),
    ("banking", lambda s: s["accounts"][min(s["accounts"])].update(balance=-3.0), "balance"),
    ("calendar", lambda s: s["events"][min(s["events"])].update(end="24:29"), "bad time"),
    ("calendar", lambda s: s["events"][min(s["events"])].update(date="2025-02-30"),
     "bad date"),
    ("inventory", lambda s: s["items"][min(s["items"])].update(price=float("inf")),
     "non-finite"),
    ("inventory", lambda s: s["items"][min(s["items"])].update(quantity=-1), "quantity"),
    ("shopping", lambda s: s["products"][min(s["products"])].update(stock=True), "stock"),
    ("smarthome", lambda s: [d.update(target=99) for d in s["devices"].values()
                             if d["type"] == "thermostat"], "target"),
    ("travel", lambda s: s["flights"][min(s["flights"])].update(seats=-1), "seats"),
    ("filesystem", lambda s: s["files"].update({"/nowhere/x.txt": "x"}), "not in an existing"),
])
def test_state_checkers_catch_corruption(domain, corrupt, expected):
    world = world_env(domain).world
    assert world.state_problems() == []
    corrupt(world.state)
    problems = world.state_problems()
    assert problems and any(expected in p for p in problems), problems


def test_generated_states_are_valid_and_references_still_solve():
    world_env("banking")  # fills _TASKS: one task per (domain, tier)
    for (domain, tier) in sorted(_TASKS):
        env = world_env(domain, tier)
        assert env.world.state_problems() == []
        for line in env.task.reference.splitlines():
            assert '"error"' not in env.step(line).observation[0]["content"], line
        assert env.step("Done.").info["success"], env.task.id
