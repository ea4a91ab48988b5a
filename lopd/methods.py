"""Per-method losses on one micro-batch, reduced exactly as eq. 10 over the whole step.

Every method scores the student's own sampled tokens. The trainer computes student and teacher
logits only at supervised positions (``(N, V)``, row-major) and calls ``micro_batch_loss``,
which returns this micro-batch's share of the step objective: per-trajectory means summed and
divided by ``rows_in_step`` (the number of trajectories of the whole step that carry signal),
so gradient accumulation over micro-batches gives exactly the per-trajectory mean of eq. 10/12.

Divergences (DESIGN.md §2; each baseline keeps its original one):

| method   | divergence                                                             |
|----------|------------------------------------------------------------------------|
| lopd     | reverse KL on the teacher's top-M + tail (eq. 9-10), margin term (eq. 13)|
| sdft     | generalised JSD, beta 0.5, full vocabulary                              |
| opsd     | generalised JSD, beta 0.5, teacher top-k renormalised                   |
| sdpo     | generalised JSD, beta 0.5, student top-k + tail                         |
| skill-sd | full-vocabulary reverse KL                                              |
| grpo     | clipped policy gradient with group-normalised advantages (no teacher)   |
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lopd import losses
from lopd.batch import gather_token_logprobs


@dataclass
class LossTerms:
    """Sums over this micro-batch's trajectories of per-trajectory means (not yet averaged)."""

    objective: torch.Tensor  # differentiable share of the step objective
    distill: float = 0.0
    delta: float = 0.0
    rows: int = 0
    gap: float = 0.0  # sum over sampled tokens of log p_trainer - log p_engine
    gap_abs: float = 0.0  # sum of its absolute values
    gap_tokens: int = 0  # tokens with an engine log-prob

    def add_engine_gap(self, trainer_logp: torch.Tensor, engine_logp: torch.Tensor) -> None:
        """Count the gap between the trainer's and the sampling engine's log-probs ``(N,)``."""
        diff = trainer_logp.detach().float() - engine_logp.float()
        self.gap += float(diff.sum())
        self.gap_abs += float(diff.abs().sum())
        self.gap_tokens += diff.numel()


def engine_logprobs(trajs, device) -> torch.Tensor | None:
    """``(N,)`` the sampling engine's log-probs of the micro-batch's action tokens, in the order
    of the supervised targets (row by row); None unless every row has one per action token."""
    if not trajs or any(len(t.sampled_logprobs) != sum(t.action_mask) for t in trajs):
        return None
    return torch.tensor([x for t in trajs for x in t.sampled_logprobs], device=device)


def divergence(method: str, student: torch.Tensor, teacher: torch.Tensor, top_m: int,
               jsd_beta: float) -> torch.Tensor:
    """Mean divergence over one trajectory's supervised tokens: ``(n, V)`` logits each."""
    s, t = student.unsqueeze(0), teacher.unsqueeze(0)  # (1, n, V)
    mask = torch.ones(s.shape[:2], dtype=torch.bool, device=s.device)
    if method == "lopd":
        return losses.topm_tail_reverse_kl(s, t, mask, top_m=top_m)
    if method == "skill-sd":
        return losses.reverse_kl_full(s, t, mask)
    if method == "sdft":
        return losses.generalized_jsd(s, t, mask, beta=jsd_beta, support="full")
    if method == "opsd":
        return losses.generalized_jsd(s, t, mask, beta=jsd_beta, support="teacher_topk",
                                      top_k=top_m, tail=False, renormalize=True)
    if method == "sdpo":
        return losses.generalized_jsd(s, t, mask, beta=jsd_beta, support="student_topk",
                                      top_k=top_m, tail=True)
    raise ValueError(f"method {method!r} has no divergence")


def distill_loss(method: str, student: torch.Tensor, teacher: torch.Tensor, targets: torch.Tensor,
                 rows: torch.Tensor, active: torch.Tensor, signal: torch.Tensor, beta: float,
                 rows_in_step: int, top_m: int, jsd_beta: float) -> LossTerms:
    """Distillation (+ LOPD's margin) for one micro-batch.

    student, teacher (N, V) logits at supervised positions; targets (N,) sampled tokens;
    rows (N,) micro-batch row of each position; active (B,) rows with context;
    signal (B,) A(tau) = 2r - 1. The margin enters as ``-beta * Delta`` (``beta * m`` is a
    constant); its gradient reaches the teacher's log-probs only.
    """
    total = student.new_zeros(())
    distill_sum, delta_sum, used = 0.0, 0.0, 0
    for row in range(active.shape[0]):
        if not bool(active[row]):
            continue
        at = (rows == row).nonzero().squeeze(-1)
        if at.numel() == 0:
            continue
        value = divergence(method, student[at], teacher[at], top_m, jsd_beta)
        total = total + value
        distill_sum += float(value.detach())
        used += 1
        if method == "lopd":
            teacher_lp = gather_token_logprobs(teacher[at], targets[at])
            student_lp = gather_token_logprobs(student[at], targets[at]).detach()
            delta = (signal[row] * (teacher_lp - student_lp)).mean()  # eq. 12, one trajectory
            total = total - beta * delta
            delta_sum += float(delta.detach())
    return LossTerms(total / max(rows_in_step, 1), distill_sum, delta_sum, used)


def grpo_micro_loss(student: torch.Tensor, targets: torch.Tensor, rows: torch.Tensor,
                    advantages: torch.Tensor, rows_in_step: int, clip_eps: float,
                    engine_logp: torch.Tensor | None = None,
                    importance_cap: float = 0.0) -> LossTerms:
    """GRPO on one micro-batch: single on-policy update, so the old log-probs are the detached
    current ones (ratio 1; the clip only matters for repeated updates on the same batch).
    With ``engine_logp (N,)`` (the sampling engine's log-probs) and ``importance_cap`` > 0 each
    token's term is weighted by ``losses.truncated_is_weights``."""
    logp = gather_token_logprobs(student, targets)  # (N,)
    weights = None
    if engine_logp is not None and importance_cap > 0:
        weights = losses.truncated_is_weights(logp, engine_logp, importance_cap)
    total = student.new_zeros(())
    used = 0
    for row in range(advantages.shape[0]):
        at = (rows == row).nonzero().squeeze(-1)
        if at.numel() == 0:
            continue
        new = logp[at].unsqueeze(0)
        mask = torch.ones_like(new, dtype=torch.bool)
        total = total + losses.grpo_loss(
            new, new.detach(), advantages[row:row + 1], mask, clip_eps=clip_eps,
            weights=None if weights is None else weights[at].unsqueeze(0))
        used += 1
    return LossTerms(total / max(rows_in_step, 1), rows=used)
