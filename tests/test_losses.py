"""Tests for lopd.losses: naive loop references, hand-worked values, gradchecks, edge cases."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lopd import losses as L

torch.set_num_threads(1)

NEG_INF = float("-inf")


# ------------------------------------------------------------------------------------------
# Naive references: explicit Python loops over the full vocabulary, float64 Python numbers
# ------------------------------------------------------------------------------------------


def _probs(row):
    mx = max(row)
    e = [math.exp(x - mx) for x in row]
    z = sum(e)
    return [x / z for x in e]


def _kl_list(p, q):
    return sum(pi * math.log(pi / qi) for pi, qi in zip(p, q) if pi > 0)


def _jsd_list(p_s, p_t, beta):
    m = [beta * t + (1 - beta) * s for s, t in zip(p_s, p_t)]
    return beta * _kl_list(p_t, m) + (1 - beta) * _kl_list(p_s, m)


def _reduce(vals, mask, reduction):
    """vals, mask: nested lists (B, T). Same semantics as eq. 10, written out."""
    if reduction == "token":
        num = sum(v for vr, mr in zip(vals, mask) for v, m in zip(vr, mr) if m)
        cnt = sum(1 for mr in mask for m in mr if m)
        return num / max(cnt, 1)
    rows = []
    for vr, mr in zip(vals, mask):
        sel = [v for v, m in zip(vr, mr) if m]
        if sel:
            rows.append(sum(sel) / len(sel))
    return sum(rows) / len(rows) if rows else 0.0


def _topk_ids(p, k):
    return sorted(range(len(p)), key=lambda i: -p[i])[:k]


def _bucket(p, ids, tail):
    head = [p[i] for i in ids]
    if tail:  # the tail mass summed explicitly over the complement (0 when ids cover V)
        return head + [sum(p[i] for i in range(len(p)) if i not in ids)]
    z = sum(head)
    return [x / z for x in head]


def naive_loss(student, teacher, mask, divergence):
    """divergence(p_student_row, p_teacher_row) -> float, applied at every position."""
    B, T, _ = student.shape
    vals = [[0.0] * T for _ in range(B)]
    for b in range(B):
        for t in range(T):
            if mask[b][t]:
                p_s = _probs(student[b, t].tolist())
                p_t = _probs(teacher[b, t].tolist())
                vals[b][t] = divergence(p_s, p_t)
    return vals


def naive_topm_rkl(p_s, p_t, m):
    ids = _topk_ids(p_t, m)
    return _kl_list(_bucket(p_s, ids, True), _bucket(p_t, ids, True))


def rand_case(B=2, T=3, V=7, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(B, T, V, generator=g, dtype=dtype) * 2
    t = torch.randn(B, T, V, generator=g, dtype=dtype) * 2
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]], dtype=torch.bool)[:B, :T]
    return s, t, mask


# ------------------------------------------------------------------------------------------
# masked_mean
# ------------------------------------------------------------------------------------------


def test_masked_mean_hand_values():
    vals = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    # trajectory: row0 (1+2)/2 = 1.5, row1 4/1 = 4, row2 ignored -> (1.5 + 4)/2 = 2.75
    assert L.masked_mean(vals, mask, "trajectory").item() == pytest.approx(2.75)
    # token: (1 + 2 + 4) / 3 = 7/3
    assert L.masked_mean(vals, mask, "token").item() == pytest.approx(7 / 3)
    with pytest.raises(ValueError):
        L.masked_mean(vals, mask, "sum")


def test_masked_mean_ignores_nan_off_mask_and_empty_mask_keeps_graph():
    vals = torch.tensor([[1.0, float("nan")], [NEG_INF, 3.0]], requires_grad=True)
    mask = torch.tensor([[True, False], [False, True]])
    out = L.masked_mean(vals, mask)
    out.backward()
    assert out.item() == pytest.approx(2.0)  # (1 + 3) / 2
    assert torch.isfinite(vals.grad).all()
    zero = L.masked_mean(vals, torch.zeros(2, 2, dtype=torch.bool))
    assert zero.item() == 0.0 and zero.grad_fn is not None


# ------------------------------------------------------------------------------------------
# topm_tail_reverse_kl (eq. 9-10)
# ------------------------------------------------------------------------------------------


def test_topm_hand_worked_three_token_vocab():
    # teacher p = (0.5, 0.3, 0.2): top-1 id 0 -> p~T = (0.5, tail 0.5)
    # student p = (0.2, 0.6, 0.2): on {0} + tail -> p~S = (0.2, 0.8)
    # KL(p~S||p~T) = 0.2 ln(0.2/0.5) + 0.8 ln(0.8/0.5) = -0.1832581 + 0.3760029 = 0.1927448
    teacher = torch.tensor([0.5, 0.3, 0.2]).log().view(1, 1, 3)
    student = torch.tensor([0.2, 0.6, 0.2]).log().view(1, 1, 3)
    out = L.topm_tail_reverse_kl(student, teacher, torch.ones(1, 1), top_m=1)
    assert out.item() == pytest.approx(0.1927448, abs=1e-6)


@pytest.mark.parametrize("top_m", [1, 3, 6, 7])
@pytest.mark.parametrize("reduction", ["trajectory", "token"])
def test_topm_matches_naive_loop(top_m, reduction):
    s, t, mask = rand_case()
    vals = naive_loss(s, t, mask.tolist(), lambda ps, pt: naive_topm_rkl(ps, pt, top_m))
    ref = _reduce(vals, mask.tolist(), reduction)
    out = L.topm_tail_reverse_kl(s, t, mask, top_m=top_m, reduction=reduction)
    assert out.item() == pytest.approx(ref, rel=1e-9, abs=1e-12)


def test_trajectory_vs_token_reduction_differ_by_row_counts():
    # Row 0 has 1 supervised token with KL a, row 1 has 2 with KL b, c (hand formula below).
    s, t, _ = rand_case()
    mask = torch.tensor([[1, 0, 0], [0, 1, 1]], dtype=torch.bool)
    kl = [[naive_topm_rkl(_probs(s[b, i].tolist()), _probs(t[b, i].tolist()), 2)
           for i in range(3)] for b in range(2)]
    a, b, c = kl[0][0], kl[1][1], kl[1][2]
    traj = L.topm_tail_reverse_kl(s, t, mask, top_m=2, reduction="trajectory")
    tok = L.topm_tail_reverse_kl(s, t, mask, top_m=2, reduction="token")
    assert traj.item() == pytest.approx((a + (b + c) / 2) / 2, rel=1e-9)
    assert tok.item() == pytest.approx((a + b + c) / 3, rel=1e-9)
    assert abs(traj.item() - tok.item()) > 1e-6


def test_row_without_supervision_is_ignored():
    s, t, _ = rand_case()
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]], dtype=torch.bool)
    only_row0 = L.topm_tail_reverse_kl(s[:1], t[:1], mask[:1], top_m=3)
    both = L.topm_tail_reverse_kl(s, t, mask, top_m=3)
    assert both.item() == pytest.approx(only_row0.item(), rel=1e-12)


def test_empty_mask_returns_connected_zero():
    s, t, _ = rand_case()
    s.requires_grad_(True)
    t.requires_grad_(True)
    out = L.topm_tail_reverse_kl(s, t, torch.zeros(2, 3, dtype=torch.bool), top_m=3)
    assert out.item() == 0.0 and out.grad_fn is not None
    out.backward()
    assert torch.equal(s.grad, torch.zeros_like(s)) and torch.equal(t.grad, torch.zeros_like(t))


def test_identical_inputs_give_zero():
    s, _, mask = rand_case()
    for fn in (
        lambda: L.topm_tail_reverse_kl(s, s.clone(), mask, top_m=3),
        lambda: L.reverse_kl_full(s, s.clone(), mask),
        lambda: L.generalized_jsd(s, s.clone(), mask),
        lambda: L.generalized_jsd(s, s.clone(), mask, support="student_topk", top_k=2),
    ):
        assert abs(fn().item()) < 1e-12


@pytest.mark.parametrize("top_m", [7, 50])
def test_m_equal_vocab_is_full_reverse_kl(top_m):
    s, t, mask = rand_case()
    full = L.reverse_kl_full(s, t, mask)
    assert L.topm_tail_reverse_kl(s, t, mask, top_m=top_m).item() == pytest.approx(
        full.item(), rel=1e-10
    )


def test_topm_gradcheck_both_inputs():
    s, t, _ = rand_case(T=2, V=5, seed=1)
    mask = torch.tensor([[1, 0], [1, 1]], dtype=torch.bool)
    s.requires_grad_(True)
    t.requires_grad_(True)
    fn = lambda a, b: L.topm_tail_reverse_kl(a, b, mask, top_m=2, chunk_size=2)
    assert torch.autograd.gradcheck(fn, (s, t))


def test_gradients_reach_student_and_teacher():
    s, t, mask = rand_case(dtype=torch.float32)
    s.requires_grad_(True)
    t.requires_grad_(True)
    L.topm_tail_reverse_kl(s, t, mask, top_m=3).backward()
    for g in (s.grad, t.grad):
        assert g[mask].abs().sum() > 0
        assert g[~mask].abs().sum() == 0  # unsupervised positions get nothing


def test_chunked_equals_unchunked_values_and_grads():
    s, t, mask = rand_case(seed=3)
    results = []
    for chunk in (1, 1000):
        a, b = s.clone().requires_grad_(True), t.clone().requires_grad_(True)
        out = L.topm_tail_reverse_kl(a, b, mask, top_m=3, chunk_size=chunk)
        out.backward()
        results.append((out.detach(), a.grad, b.grad))
    for x, y in zip(*results):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-14)


def test_tail_logmass_is_exact_where_one_minus_sum_fails():
    # One token holds all but ~6 e^-30 of the mass: 1 - sum(p) == 0 in fp32, but the exact
    # tail log-mass is log(6 e^-30 / (e^0 + 6 e^-30)) = -30 + log 6 - log1p(6 e^-30).
    logits = torch.tensor([30.0, 0, 0, 0, 0, 0, 0])
    out = L.topm_tail_logprobs(logits, torch.tensor([0]))
    expected = -30 + math.log(6) - math.log1p(6 * math.exp(-30))
    assert out[1].item() == pytest.approx(expected, rel=1e-6)
    assert out.logsumexp(-1).item() == pytest.approx(0.0, abs=1e-6)


def test_tail_empty_when_support_is_whole_vocab():
    logits = torch.randn(2, 4, requires_grad=True)
    ids = torch.arange(4).expand(2, 4)
    out = L.topm_tail_logprobs(logits, ids)
    assert torch.isinf(out[:, -1]).all()
    out[:, :-1].exp().sum().backward()
    assert torch.isfinite(logits.grad).all()


def _extreme_bf16():
    s = torch.tensor([[[1e4, -1e4, 0.0, NEG_INF, 3.0, -1e4], [5.0, 1e4, 1e4, NEG_INF, -1e4, 0.0]],
                      [[-1e4, -1e4, -1e4, NEG_INF, 1e4, 2.0], [0.0, 0, 0, NEG_INF, 0, 0]]])
    t = torch.tensor([[[-1e4, 1e4, 0.0, NEG_INF, 1e4, 7.0], [1e4, 1e4, -1e4, NEG_INF, 2.0, 0.0]],
                      [[1e4, -1e4, 3.0, NEG_INF, 1e4, 2.0], [1.0, 0, -1e4, NEG_INF, 0, 0]]])
    return s.bfloat16(), t.bfloat16(), torch.ones(2, 2, dtype=torch.bool)


@pytest.mark.parametrize(
    "fn",
    [
        lambda s, t, m: L.topm_tail_reverse_kl(s, t, m, top_m=2),
        lambda s, t, m: L.topm_tail_reverse_kl(s, t, m, top_m=6),  # M = V, tail empty
        lambda s, t, m: L.reverse_kl_full(s, t, m),
        lambda s, t, m: L.generalized_jsd(s, t, m),
        lambda s, t, m: L.generalized_jsd(s, t, m, support="student_topk", top_k=2),
        lambda s, t, m: L.generalized_jsd(
            s, t, m, support="teacher_topk", top_k=2, tail=False, renormalize=True
        ),
    ],
)
def test_bf16_extreme_logits_finite_values_and_grads(fn):
    s, t, mask = _extreme_bf16()
    s.requires_grad_(True)
    t.requires_grad_(True)
    out = fn(s, t, mask)
    out.backward()
    assert out.dtype == torch.float32 and torch.isfinite(out)
    assert torch.isfinite(s.grad).all() and torch.isfinite(t.grad).all()


@settings(max_examples=25, deadline=None)
@given(
    v=st.integers(2, 6),
    m=st.integers(1, 7),
    seed=st.integers(0, 10_000),
    scale=st.sampled_from([0.1, 1.0, 10.0]),
)
def test_topm_property_nonnegative_and_matches_naive(v, m, seed, scale):
    s, t, mask = rand_case(B=2, T=2, V=v, seed=seed)
    s, t = s * scale, t * scale
    vals = naive_loss(s, t, mask.tolist(), lambda ps, pt: naive_topm_rkl(ps, pt, m))
    out = L.topm_tail_reverse_kl(s, t, mask, top_m=m)
    assert out.item() >= -1e-12
    assert out.item() == pytest.approx(_reduce(vals, mask.tolist(), "trajectory"), abs=1e-9)


# ------------------------------------------------------------------------------------------
# Baseline divergences
# ------------------------------------------------------------------------------------------


def test_jsd_beta_half_matches_naive_loop():
    s, t, mask = rand_case(seed=5)
    ref = _reduce(naive_loss(s, t, mask.tolist(), lambda a, b: _jsd_list(a, b, 0.5)),
                  mask.tolist(), "trajectory")
    assert L.generalized_jsd(s, t, mask, beta=0.5).item() == pytest.approx(ref, rel=1e-9)


def test_jsd_beta_03_matches_naive_loop_token_reduction():
    s, t, mask = rand_case(seed=6)
    ref = _reduce(naive_loss(s, t, mask.tolist(), lambda a, b: _jsd_list(a, b, 0.3)),
                  mask.tolist(), "token")
    out = L.generalized_jsd(s, t, mask, beta=0.3, reduction="token")
    assert out.item() == pytest.approx(ref, rel=1e-9)


def test_jsd_symmetric_at_half_and_bounded_by_log2():
    s, t, mask = rand_case(seed=7)
    a = L.generalized_jsd(s, t, mask, beta=0.5)
    b = L.generalized_jsd(t, s, mask, beta=0.5)
    assert a.item() == pytest.approx(b.item(), rel=1e-12)
    assert 0 < a.item() <= math.log(2)


def test_jsd_endpoints_and_limits():
    s, t, mask = rand_case(seed=8)
    forward = _reduce(naive_loss(s, t, mask.tolist(), lambda ps, pt: _kl_list(pt, ps)),
                      mask.tolist(), "trajectory")
    reverse = L.reverse_kl_full(s, t, mask).item()
    assert L.generalized_jsd(s, t, mask, beta=0.0).item() == pytest.approx(forward, rel=1e-9)
    assert L.generalized_jsd(s, t, mask, beta=1.0).item() == pytest.approx(reverse, rel=1e-9)
    eps = 1e-5  # loss / beta -> forward KL as beta -> 0; loss / (1 - beta) -> reverse as -> 1
    assert (L.generalized_jsd(s, t, mask, beta=eps) / eps).item() == pytest.approx(
        forward, rel=1e-3)
    assert (L.generalized_jsd(s, t, mask, beta=1 - eps) / eps).item() == pytest.approx(
        reverse, rel=1e-3)


@pytest.mark.parametrize(
    "support, tail, renorm",
    [("teacher_topk", False, True), ("student_topk", True, False), ("teacher_topk", True, False)],
)
def test_jsd_topk_supports_match_naive(support, tail, renorm):
    s, t, mask = rand_case(seed=9)

    def div(p_s, p_t):
        ids = _topk_ids(p_t if support == "teacher_topk" else p_s, 3)
        return _jsd_list(_bucket(p_s, ids, tail), _bucket(p_t, ids, tail), 0.5)

    ref = _reduce(naive_loss(s, t, mask.tolist(), div), mask.tolist(), "trajectory")
    out = L.generalized_jsd(s, t, mask, support=support, top_k=3, tail=tail, renormalize=renorm)
    assert out.item() == pytest.approx(ref, rel=1e-9)


def test_jsd_rejects_bad_arguments():
    s, t, mask = rand_case()
    with pytest.raises(ValueError):
        L.generalized_jsd(s, t, mask, support="teacher_topk", tail=True, renormalize=True)
    with pytest.raises(ValueError):
        L.generalized_jsd(s, t, mask, beta=1.5)
    with pytest.raises(ValueError):
        L.generalized_jsd(s, t, mask, support="vocab")


@pytest.mark.parametrize("support", ["full", "student_topk"])
def test_jsd_gradcheck(support):
    s, t, _ = rand_case(T=2, V=5, seed=2)
    mask = torch.tensor([[1, 1], [0, 1]], dtype=torch.bool)
    s.requires_grad_(True)
    t.requires_grad_(True)
    fn = lambda a, b: L.generalized_jsd(a, b, mask, beta=0.3, support=support, top_k=2)
    assert torch.autograd.gradcheck(fn, (s, t))


# ------------------------------------------------------------------------------------------
# Privileged margin, dual update, anchor, objective
# ------------------------------------------------------------------------------------------


def test_privilege_margin_hand_value_and_broadcast():
    teacher = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]])
    student = torch.tensor([[-1.5, -1.0, -3.0], [-1.0, -2.0, -9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    adv = torch.tensor([1.0, -1.0])  # A = 2r - 1 for r = 1, 0
    # row0 deltas 0.5, -1.0 -> A=+1 -> mean -0.25; row1 deltas 0.5, 1.5 -> A=-1 -> mean -1.0
    # Delta = (-0.25 - 1.0) / 2 = -0.625
    out = L.privilege_margin(teacher, student, adv[:, None].expand(2, 3), mask)
    assert out.item() == pytest.approx(-0.625)
    assert L.privilege_margin(teacher, student, adv, mask).item() == pytest.approx(-0.625)
    # token: (0.5 - 1.0 - 0.5 - 1.5) / 4 = -0.625 too here (equal counts); change counts:
    mask2 = torch.tensor([[1, 0, 0], [1, 1, 0]])
    # trajectory: (0.5 + (-1.0)) / 2 = -0.25 ; token: (0.5 - 0.5 - 1.5) / 3 = -0.5
    assert L.privilege_margin(teacher, student, adv, mask2).item() == pytest.approx(-0.25)
    assert L.privilege_margin(teacher, student, adv, mask2, "token").item() == pytest.approx(-0.5)


def test_privilege_margin_gradient_only_to_teacher():
    g = torch.Generator().manual_seed(0)
    teacher = torch.randn(2, 3, generator=g, dtype=torch.float64, requires_grad=True)
    student = torch.randn(2, 3, generator=g, dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([[1.0, 1, 1], [-0.5, -0.5, -0.5]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]], dtype=torch.bool)
    out = L.privilege_margin(teacher, student, adv, mask)
    g_t, g_s = torch.autograd.grad(out, (teacher, student), allow_unused=True)
    assert g_s is None or torch.equal(g_s, torch.zeros_like(g_s))
    # d Delta / d teacher[b, n] = A_b / (n_b * rows) on supervised tokens
    expected = torch.tensor([[0.25, 0.25, 0], [0, -0.125, -0.125]], dtype=torch.float64)
    torch.testing.assert_close(g_t, expected)
    assert torch.autograd.gradcheck(lambda x: L.privilege_margin(x, student, adv, mask), teacher)


def test_dual_update():
    assert L.dual_update(0.0, 0.05, 0.5, 1.0) == 0.0  # clamped: 0 + (0.05 - 0.5) < 0
    assert L.dual_update(0.1, 0.05, 0.0, 2.0) == pytest.approx(0.2)  # 0.1 + 2 * 0.05
    assert L.dual_update(0.3, 0.05, 0.15, 1.0) == pytest.approx(0.2)  # 0.3 - 0.1
    out = L.dual_update(torch.tensor(0.1), 0.05, torch.tensor(0.0, requires_grad=True), 1.0)
    assert isinstance(out, float) and out == pytest.approx(0.15)


def test_latent_anchor_normalisation_and_detached_reference():
    ctx = torch.zeros(2, 3, 2, requires_grad=True)  # 2 contexts, L=3 tokens, d=2
    ref = torch.ones(2, 3, 2, requires_grad=True)
    ref_data = ref.detach().clone()
    ref_data[1] = 2.0
    ref = ref_data.requires_grad_(True)
    # context 0: 6 entries of (0-1)^2 = 6; context 1: 6 entries of 4 = 24 -> mean 15
    out = L.latent_anchor(ctx, ref)
    assert out.item() == pytest.approx(15.0)
    out.backward()
    assert ref.grad is None
    torch.testing.assert_close(ctx.grad, (ctx - ref).detach() * 2 / 2)  # d/dc = 2 (c - c0) / N
    assert L.latent_anchor(torch.zeros(3, 2), torch.ones(3, 2)).item() == pytest.approx(6.0)


def test_lopd_objective_value_and_constant_beta():
    distill = torch.tensor(0.3, requires_grad=True)
    delta = torch.tensor(0.01, requires_grad=True)
    anchor = torch.tensor(2.0, requires_grad=True)
    beta = torch.tensor(0.5, requires_grad=True)
    # 0.3 + 0.5 * (0.05 - 0.01) + 0.1 * 2.0 = 0.3 + 0.02 + 0.2 = 0.52
    out = L.lopd_objective(distill, delta, anchor, beta, margin=0.05, anchor_weight=0.1)
    assert out.item() == pytest.approx(0.52)
    out.backward()
    assert beta.grad is None
    assert delta.grad.item() == pytest.approx(-0.5) and anchor.grad.item() == pytest.approx(0.1)


def test_shape_validation():
    s, t, mask = rand_case()
    with pytest.raises(ValueError):
        L.topm_tail_reverse_kl(s, t[:, :2], mask)
    with pytest.raises(ValueError):
        L.reverse_kl_full(s, t, mask[:, :2])
    with pytest.raises(ValueError):
        L.topm_tail_reverse_kl(s, t, mask, chunk_size=0)
