"""Composer cold start (paper §3.2): train phi_0 so the latent context helps the frozen teacher.

Before joint training, the composer ``phi = (psi, chi)`` is fitted on successful trajectories
with the backbone frozen: the loss is the teacher's negative log-likelihood of the trajectory's
action tokens given the latent context composed from *other* retrieved experiences (never the
trajectory itself, or the composer would learn to copy). The teacher is the initial weights
(adapters disabled, ``lopd.teacher``), so only ``phi`` moves; the student's adapter is untouched.

Reduction: as eq. 10, a masked mean over each trajectory's action tokens, then the mean over
trajectories. ``evaluate_nll`` reports the token-weighted mean NLL per action token with or
without the latent context, the number the cold start is meant to lower.

Simplifications: plain AdamW with gradient clipping, a fixed learning rate and sampling of
examples with replacement from a seeded generator; no scheduler.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from lopd.batch import TokenBatch, collate
from lopd.composer import Composer
from lopd.models import autocast_context, model_device
from lopd.teacher import supervised_targets, teacher_logits
from lopd.types import Task, Trajectory


@dataclass
class ColdStartExample:
    """A successful trajectory (or a one-row ``TokenBatch``), its task, OTHER experience texts."""

    trajectory: Trajectory | TokenBatch
    task_text: str
    experiences: list[str]


@dataclass
class ColdStartResult:
    """Per-step training losses and the NLL per action token before and after."""

    losses: list[float] = field(default_factory=list)
    nll_no_context: float = math.nan
    nll_context_before: float = math.nan
    nll_context_after: float = math.nan
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _rows(item: Trajectory | TokenBatch) -> tuple[list[int], list[int], int]:
    """(ids, action mask, prompt_len) of one example, padding stripped."""
    if isinstance(item, Trajectory):
        return list(item.input_ids), list(item.action_mask), item.prompt_len
    if item.input_ids.shape[0] != 1:
        raise ValueError("a TokenBatch example must hold exactly one row")
    real = item.attention_mask[0].bool()
    ids = item.input_ids[0][real].tolist()
    mask = item.action_mask[0][real].long().tolist()
    return ids, mask, int(item.prompt_lens[0])


def collate_examples(examples: list[ColdStartExample], pad_id: int) -> TokenBatch:
    """Right-padded batch of the examples' trajectories."""
    trajectories = []
    for example in examples:
        ids, mask, prompt_len = _rows(example.trajectory)
        task = Task(id="", split="", domain="", prompt=example.task_text)
        trajectories.append(Trajectory(task, ids, mask, [], prompt_len, []))
    return collate(trajectories, pad_id)


def teacher_nll(
    composer: Composer | None,
    model,
    examples: list[ColdStartExample],
    with_context: bool = True,
    teacher_model=None,
    pad_id: int | None = None,
    placement=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher NLL of the supervised tokens: ``(N,)`` values and ``(N,)`` row index.
    ``placement`` (``lopd.framing.LatentPlacement``): where the latents go (default: after
    the prompt)."""
    if pad_id is None:
        pad_id = composer.tokenizer.pad_token_id if composer is not None else 0
    device = model.get_input_embeddings().weight.device
    batch = collate_examples(examples, pad_id or 0).to(device)
    context = mask = None
    if with_context:
        context, mask = composer.compose(
            [e.task_text for e in examples], [list(e.experiences) for e in examples]
        )
        if placement is not None:
            embed = (teacher_model or model).get_input_embeddings()
            batch, context, mask = placement.place(batch, context, mask, embed)
    logits = teacher_logits(
        model, batch, context, mask, positions="supervised", teacher_model=teacher_model
    )  # (N, V)
    targets = supervised_targets(batch)  # (N,)
    nll = torch.nn.functional.cross_entropy(logits.float(), targets, reduction="none")
    rows = batch.target_mask.nonzero(as_tuple=True)[0]  # (N,)
    return nll, rows


def _row_means(nll: torch.Tensor, rows: torch.Tensor, n_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's mean NLL ``(n_rows,)`` (0 where a row has no token) and which rows have one."""
    sums = torch.zeros(n_rows, device=nll.device, dtype=nll.dtype).index_add(0, rows, nll)
    counts = torch.bincount(rows, minlength=n_rows).to(nll.dtype)
    has = counts > 0
    return torch.where(has, sums / counts.clamp_min(1), torch.zeros_like(sums)), has


def _row_mean_sum(nll: torch.Tensor, rows: torch.Tensor, n_rows: int) -> torch.Tensor:
    """Sum over rows that have tokens of each row's mean NLL (eq. 10's inner mean)."""
    means, has = _row_means(nll, rows, n_rows)
    return means[has].sum()


def contrast_hinge(own: torch.Tensor, other: torch.Tensor, margin: float) -> torch.Tensor:
    """``relu(margin - (other - own))`` per row: zero once the trajectory's mean NLL with its own
    experiences' latents is at least ``margin`` below its NLL with another example's."""
    return torch.relu(margin - (other - own))


def shuffled_examples(examples: list[ColdStartExample]) -> list[ColdStartExample]:
    """The same trajectories with the experiences of another example (the next one whose
    experience list differs, cyclically); an example keeps its own when every list is equal.
    A composer whose latents ignore their input scores these as well as the real ones."""
    shuffled = []
    for index, example in enumerate(examples):
        others = [examples[(index + step) % len(examples)] for step in range(1, len(examples))]
        other = next((o for o in others if o.experiences != example.experiences), example)
        shuffled.append(ColdStartExample(example.trajectory, example.task_text,
                                         list(other.experiences)))
    return shuffled


def _rows_with_tokens(examples: list[ColdStartExample]) -> int:
    return int(collate_examples(examples, 0).target_mask.any(1).sum())


def _accumulate_step(composer, model, chunk, micro_batch, teacher_model, pad_id,
                     dtype, placement=None, contrast: float = 0.0,
                     margin: float = 0.0) -> float | None:
    """Eq. 10 loss of ``chunk`` (mean over rows of each row's mean NLL), its gradient
    accumulated over forwards of ``micro_batch`` examples: the same gradient as one forward of
    the whole chunk, with a fraction of its activations alive at a time. With ``contrast`` > 0
    each row also pays ``contrast * contrast_hinge(own, shuffled, margin)``, its NLL under the
    latents of another example of the chunk (``shuffled_examples``) as the reference.
    None: no tokens."""
    n_rows = _rows_with_tokens(chunk)
    if not n_rows:
        return None
    negatives = shuffled_examples(chunk) if contrast > 0 else None
    value = 0.0
    for start in range(0, len(chunk), micro_batch):
        part = chunk[start : start + micro_batch]
        with autocast_context(dtype, model_device(model)):
            nll, rows = teacher_nll(composer, model, part, True, teacher_model, pad_id,
                                    placement)
            own, has = _row_means(nll, rows, len(part))
            loss = own[has].sum() / n_rows
            if negatives is not None:
                other_nll, other_rows = teacher_nll(
                    composer, model, negatives[start : start + micro_batch], True,
                    teacher_model, pad_id, placement)
                other, _ = _row_means(other_nll, other_rows, len(part))
                loss = loss + contrast * contrast_hinge(own, other, margin)[has].sum() / n_rows
        if loss.requires_grad:
            loss.backward()
        value += float(loss.detach())
    return value


@torch.no_grad()
def evaluate_nll(
    composer: Composer | None,
    model,
    batch_examples: list[ColdStartExample],
    with_context: bool,
    batch_size: int = 8,
    teacher_model=None,
    dtype: str = "fp32",
    placement=None,
) -> float:
    """Mean teacher NLL per action token (token-weighted) with or without latent context."""
    total, count = 0.0, 0
    for start in range(0, len(batch_examples), batch_size):
        chunk = batch_examples[start : start + batch_size]
        with autocast_context(dtype, model_device(model)):
            nll, _ = teacher_nll(composer, model, chunk, with_context, teacher_model,
                                 placement=placement)
        total += float(nll.sum())
        count += nll.numel()
    return total / max(count, 1)


def cold_start(
    composer: Composer,
    model,
    tokenizer,
    examples: list[ColdStartExample],
    steps: int,
    lr: float = 1e-3,
    batch_size: int = 8,
    weight_decay: float = 0.0,
    grad_clip: float = 1.0,
    seed: int = 0,
    save_dir: str | Path | None = None,
    teacher_model=None,
    evaluate: bool = True,
    log=None,
    dtype: str = "fp32",
    micro_batch: int = 1,
    placement=None,
    contrast: float = 0.0,
    contrast_margin: float = 0.05,
) -> ColdStartResult:
    """Fit the composer on ``examples`` for ``steps`` AdamW steps; returns the metrics.

    ``model`` is the shared backbone (``composer.model``); the teacher runs with adapters
    disabled (or ``teacher_model``), so only ``composer.trainable_parameters()`` move. With
    ``save_dir`` the result ``phi_0`` is written by ``composer.save``. ``log(step, loss)`` is
    called after every step if given. ``tokenizer`` pads the batches. ``dtype="bf16-autocast"``
    runs the forwards under CPU/GPU bf16 autocast (``lopd.models.autocast_context``). Each
    step's gradient accumulates over forwards of ``micro_batch`` examples (peak memory
    ``benchmarks/results/memory.md``). ``contrast`` > 0 adds the contrastive hinge
    (``_accumulate_step``; one more teacher forward per example).
    """
    if not examples:
        raise ValueError("cold start needs at least one example")
    result = ColdStartResult()
    started = time.perf_counter()
    if evaluate:
        result.nll_no_context = evaluate_nll(composer, model, examples, False, batch_size,
                                             teacher_model, dtype, placement)
        result.nll_context_before = evaluate_nll(composer, model, examples, True, batch_size,
                                                 teacher_model, dtype, placement)
    params = composer.trainable_parameters()
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    generator = torch.Generator().manual_seed(seed)
    composer.train()
    for step in range(steps):
        picks = torch.randint(len(examples), (min(batch_size, len(examples)),),
                              generator=generator).tolist()
        chunk = [examples[i] for i in picks]
        optimizer.zero_grad(set_to_none=True)
        value = _accumulate_step(composer, model, chunk, max(micro_batch, 1), teacher_model,
                                 tokenizer.pad_token_id, dtype, placement, contrast,
                                 contrast_margin)
        if value is None:  # no supervised token in the draw: nothing to learn from
            continue
        if grad_clip:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        optimizer.step()
        result.losses.append(value)
        if log is not None:
            log(step, value)
    composer.eval()
    if evaluate:
        result.nll_context_after = evaluate_nll(composer, model, examples, True, batch_size,
                                                teacher_model, dtype, placement)
    if save_dir is not None:
        composer.save(save_dir)
    result.seconds = time.perf_counter() - started
    return result
