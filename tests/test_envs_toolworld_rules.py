"""ToolWorld business rules: splits, every rule enforced, references pass, rule-blind solutions fail."""

from __future__ import annotations

from functools import lru_cache

import pytest

from lopd.chat import format_tool_call
from lopd.envs import SUITES, load_suite, make_env
from lopd.envs.toolworld import TRAIN_DOMAINS, ToolWorldEnv
from lopd.envs.toolworld.rules_domains import RULES_DOMAINS
from lopd.envs.toolworld.rules_orgs import ORGS
from lopd.envs.toolworld.tasks import DOMAINS, generate_spec


@lru_cache(maxsize=4)
def split(name: str):
    return load_suite(f"toolworld-rules-{name}")


def play(task, calls):
    """Play ``calls`` (name, args) one per turn; the final info and every error returned."""
    env = ToolWorldEnv(task)
    env.reset()
    errors = []
    for name, args in calls:
        result = env.step(format_tool_call(name, args))
        errors += [m["content"] for m in result.observation if '"error"' in m["content"]]
    return env.step("Done.").info, errors


def rule_blind(task):
    """The plain task's reference: the same request solved as if the organisation had no rules."""
    return generate_spec(task.domain, task.metadata["tier"], task.metadata["seed"]).reference


def test_suites_sizes_orgs_and_split_discipline():
    assert {"toolworld-rules-train", "toolworld-rules-test", "toolworld-rules-transfer"} <= set(SUITES)
    train, test, transfer = split("train"), split("test"), split("transfer")
    assert (len(train), len(test), len(transfer)) == (2400, 200, 120)
    orgs = [{t.metadata["org"] for t in tasks} for tasks in (train, test, transfer)]
    assert orgs[0] == orgs[1] and not orgs[0] & orgs[2]
    assert all(ORGS[o].split == "train" for o in orgs[0])
    assert all(ORGS[o].split == "transfer" for o in orgs[2])
    assert {t.domain for t in train} == set(TRAIN_DOMAINS) == {t.domain for t in test}
    assert {t.domain for t in transfer} == set(DOMAINS)  # all seven, smarthome included
    assert not {t.prompt for t in test} & {t.prompt for t in train}
    seeds = [{t.metadata["seed"] for t in tasks} for tasks in (train, test, transfer)]
    assert not (seeds[0] & seeds[1] or seeds[0] & seeds[2] or seeds[1] & seeds[2])
    ids = [t.id for t in train + test + transfer]
    assert len(ids) == len(set(ids)) and test[0].id == "tw-rules-test-banking-0"
    assert [t.id for t in load_suite("toolworld-rules-test", n=5)] == [t.id for t in test[:5]]


def test_icl_suite_holds_its_own_organisations_and_seeds():
    """rules-icl (the experience-reading warm start's suite) shares no organisation, seed or
    prompt with the suites the methods are compared on."""
    icl = split("icl")
    assert "toolworld-rules-icl" in SUITES and len(icl) == 1200
    orgs = {t.metadata["org"] for t in icl}
    assert len(orgs) == 12 and all(ORGS[o].split == "icl" for o in orgs)
    others = split("train") + split("test") + split("transfer")
    assert not orgs & {t.metadata["org"] for t in others}
    assert not {t.metadata["seed"] for t in icl} & {t.metadata["seed"] for t in others}
    assert {t.domain for t in icl} == set(TRAIN_DOMAINS)
    assert 0.3 <= sum(bool(t.metadata["rules"]) for t in icl) / len(icl) <= 0.9


def test_prompt_names_the_org_and_never_the_rule():
    for task in split("test") + split("transfer"):
        org = ORGS[task.metadata["org"]]
        assert task.prompt.startswith(org.intro.split("{")[0])
        assert task.tools == RULES_DOMAINS[task.domain].schemas()  # same tools for every org
        for rule in org.rules:
            assert rule.need is None or rule.need not in task.prompt


@pytest.mark.parametrize("name", ["test", "transfer"])
def test_every_reference_passes(name):
    for task in split(name):
        info, errors = play(task, _reference_calls(task))
        assert info["success"] and not errors, (task.id, errors)


@pytest.mark.parametrize("name", ["train", "icl"])
def test_train_references_pass_sample(name):
    for task in split(name)[::7]:
        info, errors = play(task, _reference_calls(task))
        assert info["success"] and not errors, (task.id, errors)


def _reference_calls(task):
    from lopd.envs.toolworld.suites import spec_for

    return spec_for(task).reference


def test_every_rule_is_enforced_and_rejections_do_not_say_how():
    """For every rule of every organisation, some task's rule-blind solution is rejected with
    exactly that rule's message, which names what failed but not the tool or name that fixes it;
    and that task then fails."""
    seen: dict[str, str] = {}
    for task in split("train") + split("test") + split("transfer") + split("icl"):
        org = ORGS[task.metadata["org"]]
        info, errors = play(task, rule_blind(task))
        for rule in org.rules:
            wanted = f"rejected by {org.name} policy: {rule.failure}"
            hits = [e for e in errors if wanted in e and any(f'"{g} rejected' in e or
                                                             f"{g} rejected" in e
                                                             for g in rule.gated)]
            if hits and rule.key not in seen:
                assert not info["success"], task.id
                seen[rule.key] = hits[0]
    every = {rule.key for org in ORGS.values() for rule in org.rules}
    assert set(seen) == every, sorted(every - set(seen))
    for key, message in seen.items():
        rule = next(r for o in ORGS.values() for r in o.rules if r.key == key)
        assert rule.need is None or rule.need not in message, message
        assert "ticket" not in message.lower() and "FB-" not in message


def test_rule_blind_solutions_fail_on_gated_tasks():
    """A solution that ignores the rules fails on most tasks, and on every task whose reference
    differs from the plain one; tasks the rules leave alone are solved by it."""
    for name in ("test", "transfer"):
        failed = 0
        for task in split(name):
            info, _ = play(task, rule_blind(task))
            changed = _reference_calls(task) != rule_blind(task)
            assert info["success"] != changed, task.id
            failed += not info["success"]
        assert 0.5 <= failed / len(split(name)) <= 0.85


def test_rules_state_is_per_episode_and_naming_rule():
    task = next(t for t in split("test") if t.metadata["org"] == "fabrikam"
                and "fb-title" in t.metadata["rules"])
    calls = _reference_calls(task)
    create = next(args for name, args in calls if name == "create_event")
    assert create["title"].startswith("FB-")
    env = make_env(task)
    assert env.domain_cls.__name__ == "RulesCalendar"
    env.reset()
    plain = {**create, "title": create["title"].removeprefix("FB-")}
    result = env.step(format_tool_call("create_event", plain))
    assert "naming policy" in result.observation[0]["content"]
    # the prerequisite of one episode does not carry over to the next
    task = next(t for t in split("test") if "nw-freeze" in t.metadata["rules"])
    calls = _reference_calls(task)
    env = ToolWorldEnv(task)
    env.reset()
    for name, args in calls:
        env.step(format_tool_call(name, args))
    env.reset()
    result = env.step(format_tool_call(*calls[-1]))
    assert "identity not verified" in result.observation[0]["content"]


def test_plain_suites_unchanged_by_rules():
    plain = load_suite("toolworld-test", n=6)
    assert all("org" not in t.metadata for t in plain)
    assert plain[0].tools == DOMAINS[plain[0].domain].schemas()
    assert "verify_identity" not in {s["name"] for s in DOMAINS["banking"].schemas()}


def test_decision_tokens_find_the_rule_deciding_call(smol_tokenizer):
    """``benchmarks.rule_tokens``: in a reference trajectory the rule-deciding tokens spell the
    prerequisite's name; in a rule-blind one, the gated tool's name."""
    from dataclasses import replace

    from benchmarks.rule_tokens import decision_tokens
    from lopd.chat import ChatRenderer
    from lopd.reference import reference_trajectory

    renderer = ChatRenderer(smol_tokenizer)
    task = next(t for t in split("test") if t.metadata["rules"] == ["nw-freeze"])
    blind = replace(task, reference="\n".join(format_tool_call(n, a) for n, a in rule_blind(task)))
    for this, label, name in ((task, "prerequisite", "verify_identity"),
                              (blind, "gated", "freeze_account")):
        traj = reference_trajectory(this, renderer)
        positions, found = decision_tokens(traj, smol_tokenizer)
        actions = [tok for tok, bit in zip(traj.input_ids, traj.action_mask) if bit]
        assert found == label
        assert smol_tokenizer.decode([actions[i] for i in positions]).strip() == name
    plain = load_suite("toolworld-test", n=1)[0]
    assert decision_tokens(reference_trajectory(plain, renderer), smol_tokenizer) is None


def test_learning_sweep_on_the_rules_suites(monkeypatch, tmp_path):
    """``benchmarks.learning --rules``: rules training suite, rules held-out suite, own folders."""
    import argparse

    from benchmarks import learning

    for name in ("OUT", "RUNS", "HELDOUT", "REPORT_DIR", "SWEEP_OVERRIDES"):
        monkeypatch.setattr(learning, name, getattr(learning, name))
    learning.use_rules_suites()
    args = argparse.Namespace(runs=str(tmp_path), init_adapter="", checkpoint_every=8, set=[],
                              eval_tasks=0, eval_batch=4)
    job = learning.job("grpo-lr5e-4-t0.7-tier1-g8", 0, 24, args, 1)
    assert "data.train_suite=toolworld-rules-train" in job.overrides
    assert list(job.evals) == ["toolworld-rules-test"]
    assert learning.summary_path(job).parent.as_posix().endswith("results/rules/learning")
