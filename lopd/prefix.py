"""Exact shared-prefix forwards for re-scoring a group of rollouts.

Every rollout of a task starts with the same task prompt, and LOPD gives all rollouts of a task
the same privileged context, so in a teacher batch ``[prompt ; context ; trajectory]`` the
first ``prompt + context`` elements repeat G times. A causal decoder's states there do not
depend on what follows, so they can be computed once per distinct prefix and their KV cache
shared by the rows (``index_select`` in the graph: gradients of all rows that share a prefix
add up in it, exactly as if each row had run it).

The forward runs in three segments over a plan from ``lopd.teacher.plan_splice`` (compacted
rows ``[prompt ; context ; rest ; pads]`` with contiguous positions):

1. the prompt, once per distinct prefix (right-padded, masked);
2. the context on top of it, once per distinct prefix;
3. the rest of every row on top of its prefix's KV.

Splitting 1 from 2 matters for the teacher: its prompt depends on frozen weights only, so
autograd records nothing for it and the backward to a latent context covers the context and
the trajectory, not the prompt. Results equal one full forward up to float rounding (tested).

``shared_prefix_hidden`` returns the segments' hidden states side by side and a map from
spliced positions to their columns, so callers keep indexing in spliced coordinates.
"""

from __future__ import annotations

import inspect

import torch


def sharing_pays_off(device: torch.device) -> bool:
    """``optim.share_prefix=auto``: share on CPUs, where it saves FLOPs; not on GPUs, where the
    extra segment launches cost more than they save (benchmarks/results/gpu.md)."""
    return device.type == "cpu"


def layers_replay(model) -> bool:
    """True in a training forward of a model whose layers are checkpointed: transformers drops
    a checkpointed layer's KV cache, so such forwards cannot continue from a shared prefix."""
    if not (model.training and torch.is_grad_enabled()):
        return False
    flag = getattr(model, "is_activation_checkpointing", None)  # transformers >= 5.x
    return bool(flag if flag is not None else getattr(model, "is_gradient_checkpointing", False))


def prefix_groups(inputs: torch.Tensor, prefix_len: torch.Tensor) -> tuple[list[int], torch.Tensor]:
    """Rows whose first ``prefix_len[b]`` input vectors are identical share a prefix.

    Returns the representative row of each distinct prefix and ``inverse (B,)``: the index of
    each row's prefix among the representatives.
    """
    representatives: list[int] = []
    inverse: list[int] = []
    lengths = prefix_len.tolist()
    for row, length in enumerate(lengths):
        for slot, rep in enumerate(representatives):
            if lengths[rep] == length and torch.equal(inputs[rep, :length], inputs[row, :length]):
                inverse.append(slot)
                break
        else:
            inverse.append(len(representatives))
            representatives.append(row)
    return representatives, torch.tensor(inverse, dtype=torch.long, device=inputs.device)


def _cache_keyword(decoder) -> str:
    """transformers 5.x names the KV cache argument ``cache``; 4.x ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"


def _gather_rows(values: torch.Tensor, start: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """``values[b, start[b] : start[b] + length[b]]`` right-padded -> ``(B, max length, ...)``."""
    width = int(length.max()) if length.numel() else 0
    offsets = torch.arange(width, device=values.device)
    index = (start[:, None] + offsets).clamp(max=values.shape[1] - 1)  # (B, W)
    shape = (*index.shape, *([1] * (values.dim() - 2)))
    return values.gather(1, index.reshape(shape).expand(*index.shape, *values.shape[2:]))


def _run_segment(decoder, keyword, cache, past_mask, inputs, length, start):
    """Decode ``inputs (R, W, d)`` (row r real in its first ``length[r]`` slots, positions
    from ``start[r]``) after ``cache``; returns hidden states, the cache, the full mask."""
    width = inputs.shape[1]
    slots = torch.arange(width, device=inputs.device)
    mask = (slots[None, :] < length[:, None]).long()
    attention = mask if past_mask is None else torch.cat([past_mask, mask], dim=1)
    out = decoder(inputs_embeds=inputs, attention_mask=attention,
                  position_ids=start[:, None] + slots[None, :], use_cache=True,
                  **{keyword: cache})
    new_cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    return out.last_hidden_state, new_cache, attention


def shared_prefix_hidden(
    model,
    inputs: torch.Tensor,
    prompt_len: torch.Tensor,
    n_context: torch.Tensor,
    n_total: torch.Tensor,
    representatives: list[int],
    inverse: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Final hidden states of compacted rows ``inputs (B, L, d)`` with shared prefixes.

    ``prompt_len``, ``n_context``, ``n_total`` (B,): real prompt / context / all elements per
    row (every prompt must be non-empty). Returns ``hidden (B, W, d)`` and ``column (B, L)``:
    the hidden state of spliced position t of row b is ``hidden[b, column[b, t]]`` for every
    real t (padding maps to column 0).
    """
    decoder = model.get_decoder()
    keyword = _cache_keyword(decoder)
    reps = torch.tensor(representatives, dtype=torch.long, device=inputs.device)
    zero = torch.zeros_like(prompt_len)
    rep_prompt, rep_ctx = prompt_len[reps], n_context[reps]
    parts, cache, mask = [], None, None
    segments = [(inputs[reps], zero[reps], rep_prompt),  # 1. prompt
                (inputs[reps], rep_prompt, rep_ctx)]  # 2. context
    for values, start, length in segments:
        if int(length.max()) == 0:
            parts.append(None)
            continue
        hidden, cache, mask = _run_segment(decoder, keyword, cache, mask,
                                           _gather_rows(values, start, length), length, start)
        parts.append(hidden)
    cache.batch_select_indices(inverse)  # every row continues from its prefix's KV
    prefix = prompt_len + n_context
    rest = n_total - prefix
    tail = None
    if int(rest.max()) > 0:
        tail, _, _ = _run_segment(decoder, keyword, cache, mask[inverse],
                                  _gather_rows(inputs, prefix, rest), rest, prefix)
    widths = [0 if p is None else p.shape[1] for p in parts]
    pieces = [p[inverse] for p in parts if p is not None] + ([tail] if tail is not None else [])
    hidden = torch.cat(pieces, dim=1)
    t = torch.arange(inputs.shape[1], device=inputs.device)[None, :]
    column = torch.where(
        t < prompt_len[:, None], t,
        torch.where(t < prefix[:, None], widths[0] + t - prompt_len[:, None],
                    widths[0] + widths[1] + t - prefix[:, None]))
    column = torch.where(t < n_total[:, None], column, torch.zeros_like(column))
    return hidden, column
