"""ACEBench agent suites: oracle replays reach every expected end state, the two scores behave
as ACEBench's, the scenario classes keep the benchmark's rules, the simulated user only ever
sees what the agent writes, and hostile output never breaks an episode."""

from __future__ import annotations

import json
import random

import pytest

from lopd.chat import format_tool_call
from lopd.envs import SUITES, load_suite, make_env
from lopd.envs.acebench import ACEBenchEnv, load_acebench_tasks, oracle_calls
from lopd.envs.acebench.env import entry, to_schema
from lopd.envs.acebench.oracle import ORACLE_FIXES
from lopd.envs.acebench.scoring import end_state, format_call, parse_path, process_score
from lopd.envs.acebench.user import FINISH, ScriptedUser
from lopd.envs.common import MAX_CALLS_PER_TURN

TASKS = {t.id: t for t in load_acebench_tasks()}


class RecordingUser(ScriptedUser):
    """A scripted user that keeps every message the agent sent it."""

    def __init__(self, lines=None):
        super().__init__(lines)
        self.heard: list[str] = []

    def reply(self, agent_text):
        self.heard.append(agent_text)
        return super().reply(agent_text)


def episode(task_id: str, user=None, **kwargs) -> ACEBenchEnv:
    env = ACEBenchEnv(TASKS[task_id], user=user or ScriptedUser(), max_steps=100, **kwargs)
    env.reset()
    return env


def play(env: ACEBenchEnv, calls, one_turn: bool = False):
    """Play ``calls`` (one per turn, or all in one turn), then a call-free turn; the last result."""
    texts = ["\n".join(format_tool_call(n, a) for n, a in calls)] if one_turn else \
        [format_tool_call(n, a) for n, a in calls]
    for text in texts:
        assert not env.step(text).done
    result = env.step("All done.")
    return result if result.done else env.step("Thanks, that is all.")


# -- suites ------------------------------------------------------------------------------------

def test_suites_are_registered_and_loaded():
    for name, size in [("acebench", 50), ("acebench-multi-step", 20), ("acebench-multi-turn", 30)]:
        assert name in SUITES
        tasks = load_suite(name)
        assert len(tasks) == size and len(load_suite(name, n=3)) == (6 if name == "acebench" else 3)
    task = TASKS["agent_multi_turn_20"]
    assert isinstance(make_env(task, max_steps=5, max_calls=3), ACEBenchEnv)
    assert task.metadata["category"] == "multi_turn" and task.reference.startswith("<tool_call>")


def test_schemas_are_json_schemas():
    order = next(f for f in entry("agent_multi_step_0")["function"]
                 if f["name"] == "add_food_delivery_order")
    params = to_schema(order)["parameters"]
    assert params["type"] == "object" and params["properties"]["items"]["type"] == "array"
    assert params["properties"]["items"]["items"]["type"] == "object"
    reserve = next(f for f in entry("agent_multi_turn_20")["function"] if f["name"] == "reserve_flight")
    assert "payment_method" in to_schema(reserve)["parameters"]["required"]  # data: payment_methods


# -- oracle replays ----------------------------------------------------------------------------

@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_oracle_path_scores_one(task_id):
    result = play(episode(task_id), oracle_calls(task_id))
    assert result.done and result.info["success"], result.info["state_errors"]
    assert result.info["end_state"] == 1.0 and result.reward == 1.0


def test_oracle_in_one_turn_scores_the_same():
    for task_id in ("agent_multi_step_6", "agent_multi_turn_22", "agent_multi_turn_16"):
        assert play(episode(task_id), oracle_calls(task_id), one_turn=True).info["success"]


def test_literal_milestones_miss_exactly_the_fixed_tasks():
    """The published paths replayed as written: those that miss their end state are exactly the
    tasks ``ORACLE_FIXES`` repairs."""
    missed = set()
    for task_id in TASKS:
        milestones = entry(task_id)["mile_stone"]
        path = milestones[0] if isinstance(milestones[0], list) else milestones
        result = play(episode(task_id), [c for stone in path for c in parse_path(stone)])
        if not result.info["success"]:
            missed.add(task_id)
    assert missed == set(ORACLE_FIXES)


def test_calls_are_recorded_as_acebench_writes_them():
    env = episode("agent_multi_turn_0")
    play(env, oracle_calls("agent_multi_turn_0"))
    assert env.calls == entry("agent_multi_turn_0")["mile_stone"]


# -- scores ------------------------------------------------------------------------------------

def test_missing_call_fails_the_end_state_and_costs_its_milestone():
    calls = oracle_calls("agent_multi_turn_0")  # wifi, earliest id, delete 3, send
    result = play(episode("agent_multi_turn_0"), calls[:-1])
    assert not result.info["success"] and result.reward == pytest.approx(3 / 4)
    assert any("inbox" in e for e in result.info["state_errors"])


def test_wrong_value_fails_and_matches_no_milestone():
    calls = oracle_calls("agent_multi_turn_0")
    wrong = calls[:-1] + [("send_message", {**calls[-1][1], "message": "Lunch tomorrow?"})]
    result = play(episode("agent_multi_turn_0"), wrong)
    assert not result.info["success"] and result.reward == pytest.approx(3 / 4)


def test_no_call_scores_zero_and_order_matters():
    assert play(episode("agent_multi_step_2"), []).reward == 0.0
    calls = oracle_calls("agent_multi_step_19")
    backwards = play(episode("agent_multi_step_19"), list(reversed(calls)))
    assert not backwards.info["success"] and 0 < backwards.reward < 1


def test_extra_lookups_do_not_hurt():
    calls = oracle_calls("agent_multi_step_3")
    extra = [("get_products", {"merchant_name": "Jiutian BBQ"}),
             ("check_balance", {"user_name": "Jack"})] + calls
    assert play(episode("agent_multi_step_3"), extra).info["success"]


def test_the_best_alternative_path_counts():
    _, second = entry("agent_multi_step_6")["mile_stone"]
    calls = [c for stone in second[:4] for c in parse_path(stone)]  # ends before the order
    result = play(episode("agent_multi_step_6"), calls)
    assert not result.info["success"] and result.reward == pytest.approx(4 / 6)


def test_malformed_and_unknown_calls_are_observations_and_change_nothing():
    env = episode("agent_multi_step_4")
    before = env.states()
    texts = ['<tool_call>{"name": "send_message", "arguments": {</tool_call>',
             format_tool_call("delete_all", {}),
             format_tool_call("delete_message", {"message_id": 1, "force": True}),
             format_tool_call("delete_message", {"message_id": "1"}),  # ACEBench: no such id
             format_tool_call("send_message", {"sender_name": "Eve"}),  # missing arguments
             format_tool_call("get_all_message_times_with_ids", {}),  # a method, not offered
             format_tool_call("search_reminders", {"keyword": "x"})]  # offered, not implemented
    result = env.step("\n".join(texts))
    contents = [m["content"] for m in result.observation]
    assert len(contents) == len(texts) and env.states() == before
    assert "invalid JSON" in contents[0] and "unknown tool" in contents[1]
    assert "unknown argument 'force'" in contents[2] and "Message ID does not exist" in contents[3]
    assert "Error during execution" in contents[4] and "unknown tool" in contents[5]
    assert "No matching function found" in contents[6]
    assert env.calls == [format_call("delete_message", {"message_id": "1"}),
                         format_call("send_message", {"sender_name": "Eve"}),
                         format_call("search_reminders", {"keyword": "x"})]


def test_end_state_checker_hand_worked():
    expected = [{"A": {"flag": True, "box": {"1": {"x": 1}}, "items": [1]}}, {"Typo": {"v": 1}}]
    good = [{"A": {"flag": True, "box": {1: {"x": 1}, 2: {"x": 9}}, "items": [1]}}, {"B": {"v": 2}}]
    verdict = end_state(good, expected)  # int keys as strings, extra keys allowed, Typo skipped
    assert verdict["valid"] and verdict["not_compared"] == ["Typo"]
    assert not end_state([{"A": {"flag": True, "box": {}, "items": [1]}}, {"B": {}}], expected)["valid"]
    assert not end_state([{"A": {"flag": True, "box": {"1": {"x": 1}}, "items": [1, 2]}},
                          {"B": {}}], expected)["valid"]
    assert not end_state(good[:1], expected)["valid"]  # wrong number of classes
    assert not end_state([{"A": {"extra": 1}}, {"B": {}}], expected)["valid"]


def test_process_score_hand_worked():
    path = ["[a()]", "[b(x=1)]", "[c()]"]
    # greedy, as ACEBench: a is found at 1, the search for b then runs past c: 1 of 3
    assert process_score(["[b(x=1)]", "[a()]", "[c()]"], path) == pytest.approx(1 / 3)
    assert process_score(["[a()] ", "[b(x=1)]", "[z()]"], path) == pytest.approx(2 / 3)
    assert process_score(["[a()]", "[z()]", "[c()]"], path) == pytest.approx(1 / 3)  # b: to the end
    assert process_score([], path) == 0.0 and process_score([], path, end_state_ok=True) == 1.0
    assert process_score(["[c()]"], [path, ["[c()]"]]) == 1.0
    assert format_call("f", {"s": "Domino's", "n": 2, "l": [{"k": "v"}]}) == \
        "[f(s='Domino's', n=2, l=[{'k': 'v'}])]"
    assert parse_path("[f(s='Domino's'), g()]") == [("f", {"s": "Domino's"}), ("g", {})]


# -- scenario rules ----------------------------------------------------------------------------

def call(env: ACEBenchEnv, name: str, **arguments):
    content = env.step(format_tool_call(name, arguments)).observation[0]["content"]
    try:
        return json.loads(content)
    except json.JSONDecodeError:
        return content  # a plain text result


def test_phone_rules():
    env = episode("agent_multi_step_4")  # Wi-Fi off, inbox full
    assert "Wi-Fi is turned off" in call(env, "send_message", sender_name="Eve",
                                         receiver_name="Frank", message="hi")["message"]
    call(env, "turn_on_wifi")
    assert all(getattr(i, "wifi", True) for i in env.instances.values())
    assert "capacity is full" in call(env, "send_message", sender_name="Eve",
                                      receiver_name="Frank", message="hi")["message"]
    assert call(env, "get_latest_message_id")["message_id"] == 4
    call(env, "delete_message", message_id=4)
    assert call(env, "send_message", sender_name="Eve", receiver_name="Frank", message="hi")["status"]
    assert "Error during execution" in call(env, "get_latest_message_id")["error"]  # no time


def test_food_rules():
    env = episode("agent_multi_step_3")  # Jack, 120 yuan
    order = {"username": "Jack", "merchant_name": "Jiutian BBQ",
             "items": [{"product": "Korean Grilled Beef", "quantity": 1}]}
    assert "not logged in" in call(env, "add_food_delivery_order", **order)["message"]
    call(env, "login_food_platform", username="Jack", password="password654")
    assert "Insufficient balance" in call(env, "add_food_delivery_order", **order)["message"]
    order["items"] = [{"product": "Grilled Pork Belly", "quantity": 0}]
    assert "Invalid quantity" in call(env, "add_food_delivery_order", **order)["message"]
    assert call(env, "check_balance", user_name="Nobody") == 0.0


def test_travel_rules():
    env = episode("agent_multi_turn_28")
    booking = {"user_id": "user3", "password": "password789", "flight_no": "MU1566",
               "cabin": "Business Class", "payment_method": "bank", "baggage_count": 4}
    wrong = call(env, "reserve_flight", **{**booking, "password": "nope"})
    assert "Error during execution" in wrong["error"] and len(env.instances["Travel"].reservations) == 4
    assert "Total cost: 4050 yuan" in call(env, "reserve_flight", **booking)  # gold: 3 free bags
    assert env.instances["Travel"].users["user3"]["bank_balance"] == 5000.0 - 4050
    refund = call(env, "cancel_reservation", user_id="user1", reservation_id="res_1",
                  reason="The airline has canceled the flight.")
    assert "1200 yuan has been refunded" in refund and len(env.instances["Travel"].reservations) == 5


# -- episodes and the simulated user -----------------------------------------------------------

def test_multi_step_ends_on_a_turn_without_calls():
    env = episode("agent_multi_step_2")
    result = env.step("I cannot help with that.")
    assert result.done and result.observation == [] and not result.info["success"]


def test_user_sees_only_the_agents_words_and_ends_the_chat():
    user = RecordingUser(["I am Grace and want to text Frank.", "Say: lunch tomorrow?"])
    env = ACEBenchEnv(TASKS["agent_multi_turn_0"], user=user, max_steps=20)
    first = env.reset().messages[-1]
    assert first == {"role": "user", "content": "I am Grace and want to text Frank."}
    tools = env.step(format_tool_call("turn_on_wifi", {}) + "\nTurning Wi-Fi on.")
    assert tools.observation[0]["role"] == "tool" and user.heard == []
    asked = env.step("Who is it for and what should it say?")
    assert asked.observation == [{"role": "user", "content": "Say: lunch tomorrow?"}]
    done = env.step("Sent.")
    assert done.done and user.heard == ["Who is it for and what should it say?", "Sent."]
    assert not any("Wi-Fi" in heard for heard in user.heard)


def test_replies_and_steps_are_capped():
    user = RecordingUser(["hello"] * 50)
    env = ACEBenchEnv(TASKS["agent_multi_turn_3"], user=user, max_steps=30, max_replies=3)
    env.reset()
    results = [env.step("What do you need?") for _ in range(4)]
    assert results[3].done and len(user.heard) == 3 and results[3].info["user_replies"] == 3
    env = ACEBenchEnv(TASKS["agent_multi_turn_3"], user=ScriptedUser(), max_steps=2)
    env.reset()
    env.step(format_tool_call("turn_on_wifi", {}))
    assert env.step(format_tool_call("turn_on_wifi", {})).done


def test_user_turns_are_observations_in_the_trajectory(smol_tokenizer):
    from lopd.chat import ChatRenderer
    from lopd.rollout import RolloutConfig, run_episodes

    renderer = ChatRenderer(smol_tokenizer)
    turns = iter(["What should I send, and to whom?", format_tool_call("turn_on_wifi", {}), "Done."])

    class Backend:
        def generate(self, prompts, params):
            return [smol_tokenizer(next(turns), add_special_tokens=False)["input_ids"]
                    + [renderer.end_of_turn_id] for _ in prompts]

    env = ACEBenchEnv(TASKS["agent_multi_turn_0"], user=ScriptedUser(["Hi.", "Text Frank."]))
    (traj,) = run_episodes([env], Backend(), renderer, RolloutConfig(temperature=0.0,
                                                                      max_context_tokens=8192))
    assert [m["role"] for m in traj.messages[1:]] == ["user", "assistant", "user", "assistant",
                                                      "tool", "assistant"]
    inside = {i for start, end in traj.turn_spans for i in range(start, end)}
    assert {i for i, m in enumerate(traj.action_mask) if m} == inside


def test_episode_log(tmp_path, monkeypatch):
    log = tmp_path / "episodes.jsonl"
    monkeypatch.setenv("LOPD_ACEBENCH_LOG", str(log))
    play(episode("agent_multi_turn_0"), oracle_calls("agent_multi_turn_0")[:-1])
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert record["id"] == "agent_multi_turn_0" and record["end_state"] == 0.0
    assert record["process"] == pytest.approx(0.75) and len(record["calls"]) == 3


# -- hostile output ----------------------------------------------------------------------------

def test_hostile_turns_never_raise(smol_tokenizer):
    from lopd.chat import ChatRenderer
    from lopd.envs.toolworld.fuzz import hostile_turn

    renderer, rng = ChatRenderer(smol_tokenizer), random.Random(0)
    for index in range(240):
        task_id = sorted(TASKS)[index % len(TASKS)]
        env = episode(task_id, user=ScriptedUser(["hi"] * 3))
        state = env.states()
        for _ in range(3):
            result = env.step(hostile_turn(rng, env.tools, state))
            for message in result.observation:
                message["content"].encode("utf-8")
                renderer.render_message(message)
            assert len(result.observation) <= MAX_CALLS_PER_TURN + 1
            if result.done:
                assert 0.0 <= result.reward <= 1.0
                break
        json.dumps(env.states())
        assert 0.0 <= env.score()["process"] <= 1.0


def test_calls_past_the_cap_are_not_executed():
    env = episode("agent_multi_step_4", max_calls=5)
    text = "\n".join([format_tool_call("turn_on_wifi", {})] * 7)
    result = env.step(text)
    assert len(result.observation) == 6 and "not executed" in result.observation[-1]["content"]
    assert env.tool_calls == 5 and len(env.calls) == 5


@pytest.mark.slow
def test_smollm2_plays_the_user_for_a_few_turns():
    from lopd.envs.acebench.user import ModelUser

    user = ModelUser(max_new_tokens=24)
    env = ACEBenchEnv(TASKS["agent_multi_turn_0"], user=user, max_steps=4)
    first = env.reset().messages[-1]
    assert first["role"] == "user" and first["content"].strip()
    result = env.step("Hello! Who should I send a message to?")
    assert result.done or (result.observation[0]["role"] == "user"
                           and result.observation[0]["content"].strip())
    assert user.messages[0]["role"] == "system" and "Grace" in user.messages[0]["content"]
    assert FINISH not in first["content"] or result.done


def test_report_table(tmp_path):
    from benchmarks.acebench_report import read_log, table

    log = tmp_path / "episodes.jsonl"
    rows = [{"id": "agent_multi_step_0", "end_state": 1.0, "process": 1.0},
            {"id": "agent_multi_turn_0", "end_state": 0.0, "process": 0.5}]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = table({"m": read_log(log)})
    # all: end 0.5 +- sqrt(0.5 / 2) = 0.5; process 0.75 +- sqrt(0.125 / 2) = 0.25
    assert "| m | all | 2 | 0.500 +- 0.500 | 0.750 +- 0.250 |" in text
    assert "| m | multi-turn | 1 | 0.000 +- 0.000 | 0.500 +- 0.000 |" in text
    log.write_text("".join(json.dumps(r) + "\n" for r in rows + rows[:1]))
    with pytest.raises(ValueError, match="twice"):
        read_log(log)
