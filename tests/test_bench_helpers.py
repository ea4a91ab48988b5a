"""The pure helpers of the diagnostic benchmarks: the demo evaluation's cap parser and the
teacher-margin summary (hand-worked values), so their reports cannot silently misread input."""

import math

import pytest

from benchmarks.bench_demo_eval import parse_caps
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
