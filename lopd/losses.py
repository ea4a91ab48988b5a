"""Loss functions for LOPD and the baselines: pure functions of tensors, importing torch only.

Paper equations (lopd-method-and-experiments.txt, Section 3.3):

- ``topm_tail_reverse_kl``   eq. 9-10: reverse KL ``KL(p~S || p~T)`` on the teacher's top-M
                             support plus one tail bucket, masked mean per trajectory, then mean.
- ``privilege_margin``       eq. 11-12: ``Delta = E_tau[mean_n A(tau) * (log pT(a) - sg log pS(a))]``.
- ``dual_update``            the dual step below eq. 13: ``beta <- max(0, beta + lr (m - Delta))``.
- ``latent_anchor``          the anchor term of eq. 13: ``||c_phi - sg(c_phi0)||^2``.
- ``lopd_objective``         eq. 13 for a fixed ``beta``.
- Baselines (DESIGN.md section 2): ``generalized_jsd`` (SDFT, OPSD, SDPO),
  ``reverse_kl_full`` (Skill-SD; also the M = V reference), ``group_advantages`` and
  ``grpo_loss`` (GRPO), with ``truncated_is_weights`` for rollouts sampled by another engine.

Alignment convention: every function takes *target-aligned* tensors. ``logits (B, T, V)`` with
``logits[:, t]`` the distribution that scores token ``t`` (the caller has already shifted the
model output by one), ``mask (B, T)`` bool or 0/1 marking supervised (student-sampled action)
tokens, one trajectory per row. Per-token values are reduced in exactly one place,
``masked_mean``: ``"trajectory"`` (default, eq. 10/12) averages each row over its supervised
tokens, then averages the rows that have at least one; ``"token"`` is a global token mean.

Memory: the divergences gather only supervised positions, ``(N, V)``, and evaluate them in
chunks of ``chunk_size`` positions, upcast to (at least) fp32, under activation checkpointing, so
no extra full-vocabulary fp32 copy is kept for the backward pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

REDUCTIONS = ("trajectory", "token")


# --- Reduction (the only place where per-token values become a scalar) ---

def masked_mean(
    values: torch.Tensor, mask: torch.Tensor, reduction: str = "trajectory"
) -> torch.Tensor:
    """Reduce per-token ``values (B, T)`` over supervised tokens ``mask (B, T)``.

    ``"trajectory"`` (eq. 10/12): per-row masked mean, then mean over rows with >= 1 supervised
    token (other rows are ignored). ``"token"``: sum over supervised tokens / their count.
    With no supervised token at all the result is 0, still attached to ``values``' graph.
    Unsupervised entries are replaced by 0 (so NaN/inf there never leaks in, nor its gradient).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if values.shape != mask.shape or values.dim() != 2:
        raise ValueError(f"values {tuple(values.shape)} and mask {tuple(mask.shape)} must be (B, T)")
    mask_BT = mask.bool()
    vals_BT = torch.where(mask_BT, values, values.new_zeros(()))
    if reduction == "token":
        return vals_BT.sum() / mask_BT.sum().clamp_min(1)
    count_B = mask_BT.sum(dim=-1)
    row_mean_B = vals_BT.sum(dim=-1) / count_B.clamp_min(1)  # 0 for rows without tokens
    return row_mean_B.sum() / (count_B > 0).sum().clamp_min(1)


# --- Building blocks on (n, K) log-probabilities ---

def _kl(logp_P: torch.Tensor, logp_Q: torch.Tensor) -> torch.Tensor:
    """``KL(P || Q) = sum_k p_k (log p_k - log q_k)`` over the last dim; ``0 log 0 = 0``.

    Entries with ``p_k == 0`` (e.g. ``-inf`` in both) contribute exactly 0 with a 0 gradient.
    """
    p = logp_P.exp()
    live = p > 0
    diff = torch.where(live, logp_P - logp_Q, torch.zeros_like(p))  # no NaN from -inf - -inf
    return (p * diff).sum(dim=-1)


def topm_tail_logprobs(logits: torch.Tensor, support_ids: torch.Tensor) -> torch.Tensor:
    """Log-probs over ``support_ids (..., M)`` plus one tail bucket: ``(..., V) -> (..., M + 1)``.

    ``out[..., :M] = log softmax(logits)[support]``; ``out[..., M]`` is the exact tail log-mass
    ``logsumexp(logits outside the support) - logsumexp(logits)`` (eq. 9), not ``log(1 - sum
    p)``, so it stays accurate when the support holds nearly all the mass. An empty tail (M == V,
    or only ``-inf`` logits left) gives ``-inf`` with a finite (zero) gradient. Computed in the
    dtype of ``logits``; callers upcast.
    """
    full_lse = torch.logsumexp(logits, dim=-1, keepdim=True)  # (..., 1)
    support_logp = logits.gather(-1, support_ids) - full_lse  # (..., M)
    in_support = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, support_ids, True)
    in_tail = ~in_support & (logits > float("-inf"))  # (..., V)
    empty = ~in_tail.any(dim=-1, keepdim=True)  # (..., 1)
    # Empty rows get dummy zeros so logsumexp's backward never sees an all -inf row (NaN).
    tail_in = logits.masked_fill(~in_tail, float("-inf")).masked_fill(empty, 0.0)
    tail_logp = (torch.logsumexp(tail_in, dim=-1, keepdim=True) - full_lse).masked_fill(
        empty, float("-inf")
    )
    return torch.cat([support_logp, tail_logp], dim=-1)


def _as_float(x: float | torch.Tensor) -> float:
    return float(x.detach()) if isinstance(x, torch.Tensor) else float(x)


def _compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    dtype = torch.float32
    for t in tensors:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _per_position(
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    chunk_size: int,
) -> torch.Tensor:
    """Evaluate ``fn(s (n, V), t (n, V)) -> (n,)`` at supervised positions, chunked -> ``(B, T)``.

    Unsupervised positions hold 0. Each chunk is upcast to >= fp32 inside ``fn``'s checkpoint.
    """
    shapes = (tuple(student_logits.shape), tuple(teacher_logits.shape), tuple(mask.shape))
    if student_logits.dim() != 3 or shapes[0] != shapes[1] or shapes[2] != shapes[0][:2]:
        raise ValueError(f"need student, teacher logits (B, T, V) and mask (B, T); got {shapes}")
    B, T, V = student_logits.shape
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    dtype = _compute_dtype(student_logits, teacher_logits)
    idx_N = mask.reshape(-1).bool().nonzero().squeeze(-1)  # flat indices of supervised tokens
    s_NV = student_logits.reshape(B * T, V).index_select(0, idx_N)
    t_NV = teacher_logits.reshape(B * T, V).index_select(0, idx_N)

    def chunk_fn(s: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return fn(s.to(dtype), t.to(dtype))

    needs_grad = torch.is_grad_enabled() and (s_NV.requires_grad or t_NV.requires_grad)
    out = []
    # torch.split has one backward node for all chunks (slicing would allocate one each).
    for s, t in zip(s_NV.split(chunk_size), t_NV.split(chunk_size)):
        if needs_grad:
            out.append(checkpoint(chunk_fn, s, t, use_reentrant=False))
        else:
            out.append(chunk_fn(s, t))
    vals_N = torch.cat(out)
    return vals_N.new_zeros(B * T).index_put((idx_N,), vals_N).view(B, T)


# --- LOPD distillation (eq. 9-10) and full-vocabulary reverse KL ---

def topm_tail_reverse_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    top_m: int = 20,
    reduction: str = "trajectory",
    chunk_size: int = 256,
) -> torch.Tensor:
    """LOPD distillation loss (eq. 9-10): ``KL(p~S || p~T)`` on teacher top-M + tail.

    ``student_logits, teacher_logits (B, T, V)``, ``mask (B, T)`` -> scalar. At each supervised
    position the support is the teacher's ``top_m`` token ids (selected without gradient; M is
    capped at V); both distributions are reduced to those M probabilities plus the exact tail
    mass; the reverse KL over the M + 1 buckets is reduced by ``masked_mean``. Gradients flow to
    both logits (the teacher's path is how the composer learns).
    """

    def fn(s_nV: torch.Tensor, t_nV: torch.Tensor) -> torch.Tensor:
        support_nM = t_nV.detach().topk(min(top_m, t_nV.shape[-1]), dim=-1).indices
        return _kl(topm_tail_logprobs(s_nV, support_nM), topm_tail_logprobs(t_nV, support_nM))

    vals_BT = _per_position(fn, student_logits, teacher_logits, mask, chunk_size)
    return masked_mean(vals_BT, mask, reduction)


def reverse_kl_full(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    reduction: str = "trajectory",
    chunk_size: int = 256,
) -> torch.Tensor:
    """Full-vocabulary reverse KL ``KL(pS || pT)``; ``(B, T, V)`` logits, ``(B, T)`` mask.

    Used by Skill-SD (reverse KL on the full vocabulary) and as the ``M = V`` reference for
    ``topm_tail_reverse_kl``.
    """

    def fn(s_nV: torch.Tensor, t_nV: torch.Tensor) -> torch.Tensor:
        return _kl(torch.log_softmax(s_nV, dim=-1), torch.log_softmax(t_nV, dim=-1))

    vals_BT = _per_position(fn, student_logits, teacher_logits, mask, chunk_size)
    return masked_mean(vals_BT, mask, reduction)


# --- Generalised JSD (SDFT, OPSD, SDPO) ---

def _gjsd(logp_S: torch.Tensor, logp_T: torch.Tensor, beta: float) -> torch.Tensor:
    """TRL convention: ``m = beta pT + (1-beta) pS``; ``beta KL(pT||m) + (1-beta) KL(pS||m)``."""
    if beta == 0.0:
        return _kl(logp_T, logp_S)  # forward KL(pT || pS), TRL's exact endpoint
    if beta == 1.0:
        return _kl(logp_S, logp_T)  # reverse KL(pS || pT)
    dead = (logp_T == float("-inf")) & (logp_S == float("-inf"))  # keep logaddexp's grad finite
    a = torch.where(dead, torch.zeros_like(logp_T), logp_T + math.log(beta))
    b = torch.where(dead, torch.zeros_like(logp_S), logp_S + math.log1p(-beta))
    logp_M = torch.logaddexp(a, b).masked_fill(dead, float("-inf"))
    return beta * _kl(logp_T, logp_M) + (1.0 - beta) * _kl(logp_S, logp_M)


def generalized_jsd(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    beta: float = 0.5,
    support: str = "full",
    top_k: int = 20,
    tail: bool = True,
    renormalize: bool = False,
    reduction: str = "trajectory",
    chunk_size: int = 256,
) -> torch.Tensor:
    """Generalised Jensen-Shannon divergence, TRL GKD convention; ``(B, T, V)`` logits -> scalar.

    ``m = beta * pT + (1 - beta) * pS``; ``loss = beta KL(pT || m) + (1 - beta) KL(pS || m)``.
    Symmetric at ``beta = 0.5`` (= the usual JSD); as ``beta -> 0`` the loss / beta tends to the
    forward ``KL(pT || pS)``, as ``beta -> 1`` the loss / (1 - beta) tends to the reverse
    ``KL(pS || pT)``; at exactly 0 and 1 it returns those KLs unscaled (as TRL does).

    ``support``: ``"full"`` (whole vocabulary; ``tail``/``renormalize`` ignored), or
    ``"teacher_topk"`` / ``"student_topk"``: the ``top_k`` ids of that distribution (no
    gradient through the selection), plus one exact tail bucket (``tail=True``) or renormalised
    over the top-k (``renormalize=True, tail=False``). Baselines (DESIGN.md section 2):
    SDFT ``beta=0.5, support="full"``; OPSD ``beta=0.5, support="teacher_topk", tail=False,
    renormalize=True``; SDPO ``beta=0.5, support="student_topk", tail=True``.
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must lie in [0, 1], got {beta}")
    if support not in ("full", "teacher_topk", "student_topk"):
        raise ValueError(f"unknown support {support!r}")
    if support != "full" and tail == renormalize:
        raise ValueError("top-k support needs exactly one of tail=True or renormalize=True")

    def restrict(x_nV: torch.Tensor, ids_nk: torch.Tensor) -> torch.Tensor:
        if tail:
            return topm_tail_logprobs(x_nV, ids_nk)  # (n, k + 1)
        return torch.log_softmax(x_nV.gather(-1, ids_nk), dim=-1)  # (n, k)

    def fn(s_nV: torch.Tensor, t_nV: torch.Tensor) -> torch.Tensor:
        if support == "full":
            return _gjsd(torch.log_softmax(s_nV, -1), torch.log_softmax(t_nV, -1), beta)
        chooser = t_nV if support == "teacher_topk" else s_nV
        ids_nk = chooser.detach().topk(min(top_k, chooser.shape[-1]), dim=-1).indices
        return _gjsd(restrict(s_nV, ids_nk), restrict(t_nV, ids_nk), beta)

    vals_BT = _per_position(fn, student_logits, teacher_logits, mask, chunk_size)
    return masked_mean(vals_BT, mask, reduction)


# --- Privileged margin, dual variable, anchor, full objective (eq. 11-13) ---

def privilege_margin(
    teacher_logp_actions: torch.Tensor,
    student_logp_actions: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    reduction: str = "trajectory",
) -> torch.Tensor:
    """``Delta`` (eq. 11-12): outcome-weighted teacher privilege on the sampled tokens.

    ``teacher_logp_actions, student_logp_actions (B, T)``: log-probs of the student's sampled
    token ``a`` under each model (a gather). ``advantages``: ``A(tau) = 2 r - 1`` as ``(B, T)``
    (or ``(B,)``, broadcast per token); treated as a constant. Per token ``delta = log pT(a) -
    sg[log pS(a)]``; ``Delta = masked_mean(A * delta)``. Gradient reaches the teacher only.
    """
    adv_BT = advantages.detach()
    if adv_BT.dim() == 1:
        adv_BT = adv_BT[:, None].expand_as(teacher_logp_actions)
    delta_BT = teacher_logp_actions - student_logp_actions.detach()
    return masked_mean(adv_BT * delta_BT, mask, reduction)


def dual_update(
    beta: float | torch.Tensor, margin: float, delta: float | torch.Tensor, lr: float
) -> float:
    """Projected dual ascent (below eq. 13): ``max(0, beta + lr * (margin - delta))``, a float."""
    beta, margin, delta, lr = (_as_float(x) for x in (beta, margin, delta, lr))
    return max(0.0, beta + lr * (margin - delta))


def latent_anchor(context: torch.Tensor, reference: torch.Tensor,
                  reduction: str = "sum") -> torch.Tensor:
    """Anchor term of eq. 13: ``||c - sg(c0)||^2``.

    ``context, reference (..., L, d)``: latent contexts (``L = J*K`` tokens of width ``d``).
    ``reduction="sum"`` (the paper's squared L2 norm): the squared differences are *summed*
    over the latent tokens and dims of one context; ``"mean"`` (the authors' code): *averaged*
    over them, i.e. ``sum / (L * d)``. Either way the result is then averaged over the leading
    batch dims (a single ``(L, d)`` context is a batch of one). ``reference`` is detached.
    Computed in >= fp32.
    """
    if context.shape != reference.shape or context.dim() < 2:
        raise ValueError(f"context {tuple(context.shape)} / reference shape mismatch or < 2-D")
    if reduction not in ("sum", "mean"):
        raise ValueError(f"reduction must be 'sum' or 'mean', got {reduction!r}")
    dtype = _compute_dtype(context, reference)
    diff = context.to(dtype) - reference.detach().to(dtype)
    per_context = diff.pow(2).sum(dim=(-2, -1))
    if reduction == "mean":
        per_context = per_context / (context.shape[-2] * context.shape[-1])
    return per_context.mean()


def lopd_objective(
    distill: torch.Tensor,
    delta: torch.Tensor,
    anchor: torch.Tensor,
    beta: float | torch.Tensor,
    margin: float,
    anchor_weight: float,
) -> torch.Tensor:
    """Eq. 13 at fixed dual variable: ``distill + beta (margin - delta) + lambda * anchor``.

    ``beta`` is a constant here (converted to a float); it moves only through ``dual_update``.
    """
    return distill + _as_float(beta) * (margin - delta) + anchor_weight * anchor


# --- GRPO ---

def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor | int,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Group-relative advantages ``(N,)``: reward minus its group mean, / (group std + eps).

    ``group_ids (N,)`` any integer labels, or an ``int`` group size (consecutive groups). The std
    is the sample (Bessel-corrected) std, as in DeepSeekMath/TRL; a one-member group gets 0.
    """
    r_N = rewards.detach().to(_compute_dtype(rewards))
    n = r_N.shape[0]
    if isinstance(group_ids, int):
        if group_ids < 1 or n % group_ids:
            raise ValueError(f"{n} rewards cannot be split into groups of {group_ids}")
        group_ids = torch.arange(n, device=r_N.device) // group_ids
    _, inv_N = torch.unique(group_ids, return_inverse=True)
    count_G = torch.bincount(inv_N).to(r_N.dtype)
    sum_G = r_N.new_zeros(count_G.shape).index_add(0, inv_N, r_N)
    centered_N = r_N - (sum_G / count_G)[inv_N]
    if not normalize_std:
        return centered_N
    sq_G = r_N.new_zeros(count_G.shape).index_add(0, inv_N, centered_N.pow(2))
    std_G = (sq_G / (count_G - 1).clamp_min(1)).sqrt()
    denom_N = std_G[inv_N] + eps
    return torch.where(denom_N > 0, centered_N / denom_N, torch.zeros_like(centered_N))


def _grpo_terms(logp_new, logp_old, advantages, mask, clip_eps, clip_eps_high):
    """Per-token ``(ratio, advantages, clipped ratio)``, all ``(B, T)``."""
    high = clip_eps if clip_eps_high is None else clip_eps_high
    adv_BT = advantages.detach()
    if adv_BT.dim() == 1:
        adv_BT = adv_BT[:, None].expand_as(logp_new)
    # Zero the log-ratio off the mask so padded -inf log-probs cannot give inf * 0 gradients.
    log_ratio = torch.where(mask.bool(), logp_new - logp_old.detach(), torch.zeros_like(logp_new))
    ratio_BT = log_ratio.exp()
    return ratio_BT, adv_BT, ratio_BT.clamp(1.0 - clip_eps, 1.0 + high)


def grpo_loss(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    reduction: str = "trajectory",
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Clipped PPO-style surrogate for GRPO (to minimise): ``-masked_mean(w min(r A, clip(r) A))``.

    ``logp_new, logp_old (B, T)``: sampled-token log-probs (old is detached);
    ``advantages (B,)`` (or ``(B, T)``); ``r = exp(logp_new - logp_old)`` clipped to
    ``[1 - clip_eps, 1 + clip_eps_high]`` (``clip_eps_high`` defaults to ``clip_eps``; set it
    higher for DAPO's clip-higher). No KL-to-reference term. On-policy (``logp_old =
    logp_new.detach()``) the value is ``-mean(A)`` and the gradient the REINFORCE one.
    ``weights (B, T)``: optional per-token weights, no gradient (``truncated_is_weights``:
    samples drawn by another engine); None = 1.
    """
    ratio_BT, adv_BT, clipped_BT = _grpo_terms(
        logp_new, logp_old, advantages, mask, clip_eps, clip_eps_high
    )
    surrogate_BT = torch.minimum(ratio_BT * adv_BT, clipped_BT * adv_BT)
    if weights is not None:
        surrogate_BT = surrogate_BT * weights.detach()
    return -masked_mean(surrogate_BT, mask, reduction)


def truncated_is_weights(trainer_logp: torch.Tensor, engine_logp: torch.Tensor,
                         cap: float) -> torch.Tensor:
    """Truncated importance weights ``min(pi_trainer(a) / pi_engine(a), cap)`` per sampled token,
    without gradient: the correction TRL and verl apply when rollouts come from an inference
    engine whose numerics differ from the trainer's (the tokens were drawn from ``pi_engine``,
    the gradient is the trainer's). Any shape; both arguments are log-probs of the same tokens.
    """
    log_ratio = trainer_logp.detach().float() - engine_logp.detach().float()
    return log_ratio.exp().clamp(max=cap)


def clip_fraction(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
) -> float:
    """Fraction of supervised tokens where ``grpo_loss``'s clipped branch is active (no grad)."""
    with torch.no_grad():
        ratio_BT, adv_BT, clipped_BT = _grpo_terms(
            logp_new, logp_old, advantages, mask, clip_eps, clip_eps_high
        )
        active_BT = clipped_BT * adv_BT < ratio_BT * adv_BT
        return float(masked_mean(active_BT.float(), mask, "token"))
