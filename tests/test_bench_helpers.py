"""The pure helpers of the diagnostic benchmarks: the demo evaluation's cap parser and the
teacher-margin summary and the held-out fragility probe (hand-worked values), so their reports
cannot silently misread input."""

import json
import math

import pytest
import torch

from benchmarks.studies.bench_demo_eval import parse_caps
from benchmarks.studies.bench_dtype import _run_name, linear_call_times
from benchmarks.studies.heldout_fragility import decisions, is_distillation
from benchmarks.teacher_privilege import CONTEXTS, summarize


def test_parse_caps_reads_turns_by_tokens():
    assert parse_caps("4x96, 3x64") == [(4, 96), (3, 64)]


@pytest.mark.parametrize("text", ["4", "4x", "x96", "0x96", "3x0", "3*96", "3x-1"])
def test_parse_caps_names_the_bad_item(text):
    with pytest.raises(ValueError, match="TURNSxTOKENS"):
        parse_caps(text)


def test_summarize_hand_worked():
    # (signal A = 2r - 1, shift per token) of two successes and two failures
    pairs = [(1.0, 0.3), (1.0, 0.1), (-1.0, -0.2), (-1.0, 0.0)]
    s = summarize(pairs)
    assert (s["rows"], s["successes"], s["failures"]) == (4, 2, 2)
    assert s["shift_success"][0] == pytest.approx(0.2)
    assert s["shift_success"][1] == pytest.approx(0.1)  # sd 0.1414 / sqrt(2)
    assert s["shift_failure"][0] == pytest.approx(-0.1)
    assert s["difference"][0] == pytest.approx(0.3)
    assert s["difference"][1] == pytest.approx(math.hypot(0.1, 0.1))
    # Delta = mean(A * shift) = (0.3 + 0.1 + 0.2 + 0.0) / 4
    assert s["delta"][0] == pytest.approx(0.15)


def test_summarize_without_failures_reports_nan_not_zero():
    s = summarize([(1.0, 0.2)])
    assert s["failures"] == 0 and math.isnan(s["shift_failure"][0])


def test_own_context_leaves_the_variant_alone():
    assert CONTEXTS["own"] == (None, None)
    assert all(override.startswith("method.context=")
               for override, _ in (v for k, v in CONTEXTS.items() if k != "own"))


def test_entropy_gap_summary_and_hand_worked_entropy():
    import torch

    from benchmarks.teacher_privilege import entropy

    uniform = torch.zeros(2, 4)
    assert entropy(uniform).tolist() == pytest.approx([math.log(4)] * 2)
    assert entropy(torch.tensor([[0.0, -1e4]])).item() == pytest.approx(0.0, abs=1e-6)
    s = summarize([(1.0, 0.1, 0.5), (-1.0, 0.0, 0.3)])
    assert s["entropy_gap"][0] == pytest.approx(0.4)


class _FixedLogits(torch.nn.Module):
    """A 'policy' whose next-token logits at each position are given."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.tensor([logits], dtype=torch.float32)

    def forward(self, input_ids):
        return type("Out", (), {"logits": self.logits})()


def test_decisions_read_the_sampled_tokens_and_their_best_rival():
    # three positions over a vocabulary of 3; tokens 1 and 2 are sampled, token 0 is a prompt
    policy = _FixedLogits([[0.0, 2.0, 0.0], [1.0, 1.0, math.log(2.0)], [0.0, 0.0, 0.0]])
    traj = type("Traj", (), {"input_ids": [0, 1, 0], "action_mask": [0, 1, 1]})()
    chosen, rival = decisions(policy, traj, autocast=False)
    z0 = math.log(math.exp(2.0) + 2.0)  # position 0 predicts token 1 (logit 2) against two 0s
    z1 = math.log(2 * math.e + 2.0)  # position 1 predicts token 0 (logit 1) against 1 and log 2
    assert chosen.tolist() == pytest.approx([2.0 - z0, 1.0 - z1])
    assert rival.tolist() == pytest.approx([0.0 - z0, 1.0 - z1])  # a tie at the second decision


def test_distillation_runs_are_told_by_their_method_prefix():
    assert is_distillation("sdpo-lr5e-5-t0.7-tier1-g8-s0")
    assert is_distillation("skill-sd-lr5e-4-t0.7-tier1-g8-s1")
    assert not is_distillation("grpo-lr5e-4-t0.7-tier1-g8-s0")
    assert not is_distillation("lopd-lr5e-4-t0.7-tier1-g8-s1")


def test_dtype_bench_names_runs_and_times_every_way():
    adapter = "runs/learning/grpo-x-s2-wabc/checkpoints/step-000024/student"
    assert _run_name(adapter) == "grpo-x-s2-wabc/step-000024"
    assert _run_name("my/adapter") == "my/adapter"
    times = linear_call_times(rows=2, calls=2)
    assert set(times) == {"fp32", "bf16 autocast", "bf16 weights"}
    assert all(value >= 0 for value in times.values())


def test_forward_only_scoring_restores_autograd_and_the_composer_backward():
    from types import SimpleNamespace

    from benchmarks.teacher_privilege import forward_only

    calls = []
    trainer = SimpleNamespace(rt=SimpleNamespace(composer_backward=lambda *a: calls.append(a) or 1.0))
    original = torch.Tensor.backward
    x = torch.ones(2, requires_grad=True)
    with forward_only(trainer):
        assert not torch.is_grad_enabled()
        (x * 2).sum().backward()  # a no-op: no graph, no error, no gradient
        assert trainer.rt.composer_backward(None, None) == 0.0 and not calls
    assert x.grad is None and torch.Tensor.backward is original and torch.is_grad_enabled()
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0] and trainer.rt.composer_backward() == 1.0


def test_rules_probe_states_the_task_organisation_rules_and_the_other_one_as_control():
    from benchmarks.rules_probe import pick
    from lopd.envs.toolworld.rules_orgs import ORGS
    from lopd.envs.toolworld.suites import load_tasks

    task = next(t for t in load_tasks("rules-test") if t.metadata["org"] == "northwind")
    (own,) = pick(task, {}, "rule-text", 3)
    (other,) = pick(task, {}, "other-rule-text", 3)
    assert own.startswith("Northwind Bank policy: ") and other.startswith("Harbor Credit Union policy: ")
    assert all(rule.text in own for rule in ORGS["northwind"].rules)
    assert not any(rule.text in other for rule in ORGS["northwind"].rules)


def test_rules_probe_pairs_each_context_with_its_control_per_task():
    from benchmarks.rules_probe import summarize

    def shift(rule, gated, every):
        return {"rule_tokens": rule, "gated": gated, "all": every}

    rows = [{"logp_prerequisite": -6.0, "logp_gated": -2.0,
             "same-rule": shift(0.5, -0.4, 0.0), "other-org": shift(0.1, -0.1, 0.0)},
            {"logp_prerequisite": -5.0, "logp_gated": None,
             "same-rule": shift(0.3, None, 0.1), "other-org": shift(0.3, None, 0.0)}]
    out = summarize(rows)
    mean, se, n = out["same-rule - other-org/rule_tokens"]
    assert (round(mean, 6), round(se, 6), n) == (0.2, 0.2, 2)  # diffs 0.4 and 0.0
    assert out["same-rule - other-org/gated"][:1] == [pytest.approx(-0.3)]
    assert out["same-rule - other-org/gated"][2] == 1
    assert "rule-text - other-rule-text/rule_tokens" not in out


def test_demo_on_headline_pairs_runs_with_the_warm_start_by_tier(tmp_path, monkeypatch):
    from benchmarks.studies import demo_on_headline as study
    from lopd.envs import load_suite

    monkeypatch.setattr(study, "OUT", tmp_path / "demo_on_headline")
    study.OUT.mkdir()
    tasks = load_suite(study.SUITE)
    ids = [t.id for t in tasks]
    tier1 = [t.id for t in tasks if t.metadata["tier"] == 1]
    warm = {t: 0.0 for t in ids}
    first = {t: float(t in tier1[:10]) for t in ids}
    second = {t: float(t in tier1[:20]) for t in ids}

    def record(name, per_task):
        (study.OUT / f"{name}.json").write_text(json.dumps(
            {"name": name, "run": f"runs/{name}", "success": sum(per_task.values()) / len(ids),
             "method": "warm start" if name == study.WARM else "grpo",
             "per_task": per_task, "seconds": 1.0, "backend": "hf", "cpu": "test cpu"}))

    record(study.WARM, warm)
    record("a", first)
    record("b", second)
    text = study.report()
    assert f"| a (grpo, `runs/a`) | {10 / len(ids):.3f} |" in text
    assert "| grpo, pooled (2 runs)" in text and f"**{15 / len(ids):+.3f}" in text
    tier_row = next(line for line in text.splitlines() if line.startswith("| tier 1 |"))
    assert "0 -> 10" in tier_row and "0 -> 20" in tier_row and "0 -> 15" in tier_row
    assert next(line for line in text.splitlines() if line.startswith("| tier 2 |")).count("0 -> 0") == 3


def test_demo_on_headline_refuses_an_evaluation_with_other_settings():
    from benchmarks.studies.demo_on_headline import WARM_ADAPTER, _check_settings

    meta = {"suites": ["toolworld-test"], "max_steps": 6, "max_new_tokens": 96,
            "temperature": 0.0, "samples": 1, "limit": 0, "run": "", "init_adapter": WARM_ADAPTER}
    _check_settings(meta, None)
    with pytest.raises(SystemExit, match="max_steps"):
        _check_settings({**meta, "max_steps": 3}, None)
    with pytest.raises(SystemExit, match="run"):
        _check_settings(meta, "runs/demo/grpo")
