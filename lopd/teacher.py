"""Teacher and student forward passes with privileged context spliced in (paper eq. 7-8).

The teacher is the frozen *initial* weights ``theta_bar`` (eq. 8): with a LoRA student on a
PeftModel, the same model with every adapter disabled (``adapters_disabled``); with a fully fine-tuned
student, a separate frozen copy passed as ``teacher_model``. The teacher sees
``[s ; c]`` (eq. 7): the context ``c`` is inserted **right after the first ``prompt_lens[b]``
real tokens of row b** (the initial task prompt: system + first user message). For a
single-turn task that is exactly ``[s ; c]``; for a multi-turn episode the context sits after
the task prompt, before the first assistant turn, and stays in view for every later turn.

Context comes in two kinds through one code path (``plan_splice`` + ``apply_splice``):

- latent: ``context (B, C, d)`` float vectors used as input embeddings (LOPD's composer);
- text: ``context (B, C)`` long token ids (baselines), embedded by the model's own table.

``context_mask (B, C)`` marks real context slots; padding slots are dropped (not attended).
Each row is *compacted*: ``[prompt ; real context ; rest of the real tokens ; padding]`` with
position ids ``0..`` contiguous over the real elements, so left/right padding and per-row prompt
lengths give exactly the results of running every row alone.

Alignment. All outputs follow lopd's convention (``lopd.batch``): the returned ``logits[:, i]``
predicts ``batch.input_ids[:, i + 1]``, for teacher and student alike, so losses compare them
token by token. After splicing, the logit that predicts original token ``i + 1`` sits at
``dest(i + 1) - 1`` (for the first token after the prompt, that is the last context slot);
``Splice.pred_index`` holds these positions and the LM head is applied only there.

Positions (memory). Full-vocabulary logits dominate memory, so ``positions`` chooses where the
LM head runs: ``"all"`` -> ``(B, T, V)``; ``"supervised"`` -> ``(N, V)`` for the N positions
where ``batch.target_mask`` is True (padded with a False last column), row-major order; a
``(B, T)`` bool tensor -> ``(N, V)`` for those positions; ``"packed"`` -> ``(B, S, V)``, each
row's supervised positions packed to the left (``packed_targets`` gives the matching targets
and ``(B, S)`` mask), a drop-in for per-row losses on ``(B, T, V)`` + mask at a fraction of
the memory when observations are long. ``return_hidden=True`` returns the
final hidden states (``d`` in place of ``V``) instead, for a caller that applies the head in
chunks (``lm_head``). Simplification: logits are ``lm_head(final hidden)`` (with Gemma-style
soft-capping if configured) — true for Llama/SmolLM2/Qwen/Mistral.

PEFT pitfall. ``set_adapter`` and ``disable_adapter`` also flip ``requires_grad`` (every adapter
but the active one is frozen on exit), which silently stops the composer's or the student's
gradients. Use ``adapters_disabled`` / ``lopd.composer.use_adapter``, which restore the flags.

Gradients. No parameter of the teacher is updated, but when a latent context requires grad the
forward keeps its activations in the graph (eq. 8: the loss is differentiable w.r.t. ``c``).
Without a differentiable context the teacher runs under ``no_grad`` (it is then a fixed target).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lopd.batch import TokenBatch
from lopd.prefix import layers_replay, prefix_groups, shared_prefix_hidden

Positions = str | torch.Tensor


@dataclass
class Splice:
    """Where each element goes when context is spliced into a batch (see module docstring).

    dest           (B, T) long  spliced position of every original position (pads included)
    ctx_dest       (B, C) long  spliced position of every context slot (-1 for padding slots)
    attention_mask (B, L) long  1 on real tokens and real context
    position_ids   (B, L) long  contiguous over the real elements of each row
    pred_index     (B, T) long  spliced position whose output predicts original token i + 1
    n_context      (B,)   long  real context slots inserted in each row
    """

    dest: torch.Tensor
    ctx_dest: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    pred_index: torch.Tensor
    n_context: torch.Tensor

    @property
    def length(self) -> int:
        return self.attention_mask.shape[1]


def plan_splice(
    attention_mask: torch.Tensor, prompt_lens: torch.Tensor, context_mask: torch.Tensor | None
) -> Splice:
    """Plan ``[real[:p] ; context ; real[p:] ; pads]`` per row (``attention_mask (B, T)``)."""
    real = attention_mask.bool()  # (B, T)
    batch, length = real.shape
    device = real.device
    n_real = real.sum(1)  # (B,)
    if context_mask is None:
        context_mask = torch.zeros(batch, 0, dtype=torch.bool, device=device)
    context_mask = context_mask.bool().to(device)
    n_ctx = context_mask.sum(1)  # (B,)
    prompt = prompt_lens.to(device).clamp(min=0).minimum(n_real)  # (B,)
    rank = real.long().cumsum(1) - 1  # (B, T) rank among real tokens
    pad_rank = (~real).long().cumsum(1) - 1
    after_prompt = (rank >= prompt[:, None]).long()
    dest = torch.where(
        real, rank + after_prompt * n_ctx[:, None], (n_real + n_ctx)[:, None] + pad_rank
    )
    ctx_rank = context_mask.long().cumsum(1) - 1
    ctx_dest = torch.where(context_mask, prompt[:, None] + ctx_rank, torch.full_like(ctx_rank, -1))
    total = length + (int(n_ctx.max()) if batch else 0)
    positions = torch.arange(total, device=device).expand(batch, total)
    attention = (positions < (n_real + n_ctx)[:, None]).long()
    pred_index = torch.cat([dest[:, 1:] - 1, dest[:, -1:]], dim=1).clamp(min=0)
    return Splice(dest, ctx_dest, attention, positions.clone(), pred_index, n_ctx)


def apply_splice(
    plan: Splice,
    values: torch.Tensor,
    context: torch.Tensor | None = None,
    fill: float | bool = 0,
) -> torch.Tensor:
    """Place ``values (B, T, ...)`` and real ``context (B, C, ...)`` slots -> ``(B, L, ...)``.

    Differentiable w.r.t. both inputs (out-of-place ``index_put``); unused slots hold ``fill``.
    """
    batch, length = values.shape[:2]
    out = values.new_full((batch, plan.length, *values.shape[2:]), fill)
    rows = torch.arange(batch, device=values.device)[:, None].expand(batch, length)
    out = out.index_put((rows, plan.dest), values)
    if context is not None and context.shape[1] > 0:
        keep = plan.ctx_dest >= 0  # (B, C)
        ctx_rows = torch.arange(batch, device=values.device)[:, None].expand_as(keep)
        out = out.index_put((ctx_rows[keep], plan.ctx_dest[keep]), context[keep].to(out.dtype))
    return out


def realign(spliced: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Gather ``spliced (B, L, ...)`` at ``index (B, T)`` -> ``(B, T, ...)``."""
    expanded = index.reshape(*index.shape, *([1] * (spliced.dim() - 2)))
    return spliced.gather(1, expanded.expand(*index.shape, *spliced.shape[2:]))


def pad_context_ids(
    context_ids: Sequence[Sequence[int]], pad_id: int = 0, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad per-row token lists -> ``ids (B, C)`` long, ``mask (B, C)`` bool."""
    width = max((len(ids) for ids in context_ids), default=0)
    ids = torch.full((len(context_ids), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(context_ids), width), dtype=torch.bool, device=device)
    for row, row_ids in enumerate(context_ids):
        ids[row, : len(row_ids)] = torch.tensor(list(row_ids), dtype=torch.long, device=device)
        mask[row, : len(row_ids)] = True
    return ids, mask


def insert_text_context(
    batch: TokenBatch, context_ids: Sequence[Sequence[int]], pad_id: int = 0
) -> tuple[TokenBatch, torch.Tensor]:
    """Splice text context ids into a batch; returns ``(spliced batch, pred_index (B, T))``.

    The spliced batch is compacted and right-padded; its ``prompt_lens`` include the context
    and its ``action_mask`` is False on context. Run any forward on it, then
    ``realign(logits, pred_index)`` gives ``(B, T, V)`` aligned with the *original* batch.
    ``teacher_logits(..., context=ids)`` does all of this internally (same code path).
    """
    ids, mask = pad_context_ids(context_ids, pad_id, batch.input_ids.device)
    plan = plan_splice(batch.attention_mask, batch.prompt_lens, mask)
    spliced = TokenBatch(
        input_ids=apply_splice(plan, batch.input_ids, ids, fill=pad_id),
        attention_mask=plan.attention_mask,
        action_mask=apply_splice(plan, batch.action_mask.bool(), None, fill=False),
        prompt_lens=batch.prompt_lens.to(ids.device).minimum(batch.attention_mask.sum(1))
        + plan.n_context,
    )
    return spliced, plan.pred_index


def select_positions(batch: TokenBatch, positions: Positions) -> torch.Tensor | None:
    """``(B, T)`` bool of logit positions to compute, or None for all of them."""
    if isinstance(positions, torch.Tensor):
        selected = positions.bool()
        if selected.shape[1] == batch.input_ids.shape[1] - 1:  # target-aligned (B, T-1)
            selected = torch.cat([selected, selected.new_zeros(selected.shape[0], 1)], dim=1)
        return selected
    if positions == "all":
        return None
    if positions == "supervised":
        mask = batch.target_mask.bool()
        return torch.cat([mask, mask.new_zeros(mask.shape[0], 1)], dim=1)
    raise ValueError(
        f"positions must be 'all', 'supervised', 'packed' or a bool tensor, got {positions!r}"
    )


def _next_ids(batch: TokenBatch) -> torch.Tensor:
    """``(B, T)``: the token each position predicts (the last one repeats itself)."""
    return torch.cat([batch.input_ids[:, 1:], batch.input_ids[:, -1:]], dim=1)


def supervised_targets(batch: TokenBatch, positions: Positions = "supervised") -> torch.Tensor:
    """The tokens predicted at the selected positions: ``(N,)`` long, row-major."""
    selected = select_positions(batch, positions)
    return _next_ids(batch) if selected is None else _next_ids(batch)[selected]


def packed_index(batch: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Supervised positions of each row packed to the left.

    Returns ``index (B, S)`` (positions into T; filler slots point at an unsupervised position)
    and ``mask (B, S)`` bool, ``S`` = the most supervised tokens of any row.
    """
    selected = select_positions(batch, "supervised")  # (B, T)
    length = selected.shape[1]
    order = torch.arange(length, device=selected.device).expand_as(selected)
    keys = torch.where(selected, order, order + length)
    counts = selected.sum(1)
    width = int(counts.max()) if counts.numel() else 0
    index = keys.argsort(dim=1)[:, :width]
    mask = torch.arange(width, device=selected.device)[None, :] < counts[:, None]
    return index, mask


def packed_targets(batch: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """``targets (B, S)`` and ``mask (B, S)`` matching ``positions="packed"`` outputs."""
    index, mask = packed_index(batch)
    return _next_ids(batch).gather(1, index), mask


def lm_head(model, hidden: torch.Tensor) -> torch.Tensor:
    """Logits from final hidden states ``(..., d) -> (..., V)`` (soft-capping if configured)."""
    logits = model.get_output_embeddings()(hidden)
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def decoder_hidden_states(
    model,
    inputs_embeds: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Final hidden states ``(B, L, d)`` of the decoder body (no LM head, no cache)."""
    out = model.get_decoder()(
        inputs_embeds=inputs_embeds,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=False,
    )
    return out.last_hidden_state


def forward_aligned(
    model,
    batch: TokenBatch,
    context: torch.Tensor | None = None,
    context_mask: torch.Tensor | None = None,
    positions: Positions = "all",
    return_hidden: bool = False,
    share_prefix: bool = True,
) -> torch.Tensor:
    """One forward of ``model`` as it stands (adapters as they are), context spliced in.

    ``context``: None, ``(B, C, d)`` float (latent) or ``(B, C)`` long (text ids);
    ``context_mask (B, C)`` bool (default: all slots real). Returns ``(B, T, V|d)`` for
    ``positions="all"`` or ``(N, V|d)`` otherwise (see module docstring).
    """
    ids = batch.input_ids
    embed = model.get_input_embeddings()
    if context is not None and context_mask is None:
        context_mask = torch.ones(context.shape[:2], dtype=torch.bool, device=ids.device)
    if context is not None and not torch.is_floating_point(context):
        context = embed(context.to(ids.device))  # text ids -> (B, C, d)
    plan = plan_splice(batch.attention_mask, batch.prompt_lens, context_mask)
    inputs = apply_splice(plan, embed(ids), context)  # (B, L, d)
    hidden, pred_index = _spliced_hidden(model, batch, plan, inputs, share_prefix)
    if isinstance(positions, str) and positions == "packed":
        index, _ = packed_index(batch)  # (B, S)
        hidden = realign(hidden, pred_index.gather(1, index))  # (B, S, d)
        return hidden if return_hidden else lm_head(model, hidden)
    selected = select_positions(batch, positions)
    if selected is None:
        hidden = realign(hidden, pred_index)  # (B, T, d)
    else:
        rows, cols = selected.nonzero(as_tuple=True)
        hidden = hidden[rows, pred_index[rows, cols]]  # (N, d)
    return hidden if return_hidden else lm_head(model, hidden)


def _spliced_hidden(model, batch: TokenBatch, plan: Splice, inputs: torch.Tensor,
                    share_prefix: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states of the spliced rows and the index predicting each original token.

    With ``share_prefix``, rows with identical ``[prompt ; context]`` run it once
    (``lopd.prefix``); that path is taken when some prefix repeats or the context needs grad
    (the prompt then stays out of the backward). Otherwise one plain forward.
    """
    n_real = batch.attention_mask.sum(1).to(inputs.device)
    prompt = batch.prompt_lens.to(inputs.device).clamp(min=0).minimum(n_real)
    if share_prefix and inputs.shape[0] and bool((prompt > 0).all()) and not layers_replay(model):
        prefix = prompt + plan.n_context
        representatives, inverse = prefix_groups(inputs, prefix)
        needs_grad = torch.is_grad_enabled() and inputs.requires_grad
        if len(representatives) < inputs.shape[0] or needs_grad and int(plan.n_context.max()):
            hidden, column = shared_prefix_hidden(model, inputs, prompt, plan.n_context,
                                                  n_real + plan.n_context, representatives,
                                                  inverse)
            return hidden, column.gather(1, plan.pred_index)
    hidden = decoder_hidden_states(model, inputs, plan.attention_mask, plan.position_ids)
    return hidden, plan.pred_index


def student_logits(
    model, batch: TokenBatch, positions: Positions = "all", return_hidden: bool = False,
    share_prefix: bool = True,
) -> torch.Tensor:
    """The student's logits (its active adapter, no context): ``(B, T, V)`` or ``(N, V)``."""
    return forward_aligned(model, batch, None, None, positions, return_hidden, share_prefix)


def is_peft(model) -> bool:
    return hasattr(model, "peft_config") and callable(getattr(model, "disable_adapter", None))


@contextlib.contextmanager
def keep_requires_grad(model, trainable: Sequence[torch.nn.Parameter] = ()):
    """Restore every parameter's ``requires_grad`` when the block is entered and left.

    PEFT's ``set_adapter`` and ``disable_adapter`` flip the flags (they freeze every adapter but
    the active one), which would silently stop gradients of the *other* adapter (the composer
    while the teacher runs, the student while the composer encodes). Call PEFT inside this
    block, then ``restore()`` (yielded) after it; ``trainable`` are kept requiring grad.
    """
    flags = [(p, p.requires_grad) for p in model.parameters()]

    def restore() -> None:
        for param, flag in flags:
            param.requires_grad_(flag)
        for param in trainable:
            param.requires_grad_(True)

    try:
        yield restore
    finally:
        restore()


@contextlib.contextmanager
def adapters_disabled(model):
    """``model.disable_adapter()`` (the initial weights) without PEFT's requires_grad side
    effects; a no-op for a model without adapters."""
    if not is_peft(model):
        yield model
        return
    with keep_requires_grad(model) as restore, model.disable_adapter():
        restore()
        yield model


def teacher_logits(
    model,
    batch: TokenBatch,
    context: torch.Tensor | None = None,
    context_mask: torch.Tensor | None = None,
    positions: Positions = "all",
    *,
    teacher_model=None,
    return_hidden: bool = False,
    share_prefix: bool = True,
) -> torch.Tensor:
    """Teacher logits (eq. 8) aligned with the student's positions of ``batch.input_ids``.

    Runs ``teacher_model`` if given (frozen copy for a fully fine-tuned student), else
    ``model``; a PeftModel runs with all adapters disabled (the initial weights). A plain model
    without adapters is taken to be the frozen teacher itself. Shapes as ``forward_aligned``.
    """
    target = teacher_model if teacher_model is not None else model
    differentiable = (
        context is not None and torch.is_floating_point(context) and context.requires_grad
    )
    if differentiable and any(
        p.requires_grad for n, p in target.named_parameters() if "lora_" not in n
    ):
        raise ValueError("the teacher has trainable weights: freeze it (lopd.models.freeze) or "
                         "pass a frozen copy as teacher_model")
    grad = torch.is_grad_enabled() and differentiable
    with adapters_disabled(target), torch.set_grad_enabled(grad):
        return forward_aligned(target, batch, context, context_mask, positions, return_hidden,
                               share_prefix)
