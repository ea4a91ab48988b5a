"""Generation backends: batched sampling of one assistant turn for many conversations at once.

``HFBackend`` is a hand-written decode loop over a transformers causal LM with a KV cache. On
CPU it is much faster than ``model.generate()`` and gives the same greedy outputs (DESIGN.md
§4). What makes it fast:

- prompts are left-padded into one batch; position ids follow the attention mask so padding
  does not shift positions;
- the prefill computes the LM head for the last position only (``logits_to_keep=1``): the
  full-vocabulary head over every prompt token is the largest cost for a 135M model;
- identical prompts (the G rollouts of one task start from the same prompt) are prefilled once
  and their KV cache rows are copied; on a CPU, prefill of long tool prompts dominates;
- rows that finish (end-of-turn token or budget) leave the batch and their KV cache rows are
  dropped, so the remaining rows decode at the cost of a smaller batch.

The ``GenerationBackend`` protocol is the seam for other engines (vLLM on GPUs): anything with
``generate(prompts, params) -> list[list[int]]`` can drive the rollout engine.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass
class SamplingParams:
    """How one turn is sampled. ``temperature == 0`` means greedy decoding."""

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0


class GenerationBackend(Protocol):
    def generate(self, prompts: Sequence[list[int]], params: SamplingParams) -> list[list[int]]:
        """Sampled ids per prompt; each ends with a stop id unless the budget ran out."""
        ...


def sample_next(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> torch.Tensor:
    """Sample one token per row from ``logits (B, V)``; greedy when ``temperature == 0``."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = sorted_probs.cumsum(-1) - sorted_probs < top_p  # always keeps the top token
        sorted_probs = sorted_probs * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


class HFBackend:
    """Batched KV-cache decoding with a transformers model (see the module docstring)."""

    def __init__(self, model, stop_ids: set[int], pad_id: int, autocast: bool = False):
        self.model = model
        self.stop_ids = torch.tensor(sorted(stop_ids), dtype=torch.long)
        self.pad_id = pad_id
        self.autocast = autocast
        self.device = next(model.parameters()).device
        # transformers 5.x names the KV cache argument `cache`; 4.x called it `past_key_values`.
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        params = inspect.signature(base.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    def _left_pad(self, prompts: Sequence[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        length = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), length), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), length), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, length - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
            attention[row, length - len(prompt):] = 1
        return ids.to(self.device), attention.to(self.device)

    def _forward(self, ids, attention, positions, cache):
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            out = self.model(
                input_ids=ids, attention_mask=attention, position_ids=positions,
                use_cache=True, logits_to_keep=1, **{self._cache_arg: cache},
            )
        new_cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.logits[:, -1].float(), new_cache

    @torch.no_grad()
    def generate(self, prompts: Sequence[list[int]], params: SamplingParams) -> list[list[int]]:
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        generator = torch.Generator(device="cpu").manual_seed(params.seed)
        first_of: dict[tuple[int, ...], int] = {}
        unique = [first_of.setdefault(tuple(p), len(first_of)) for p in prompts]
        distinct = [list(p) for p in first_of]
        ids, attention = self._left_pad(distinct)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        logits, cache = self._forward(ids, attention, positions, None)
        if len(distinct) < len(prompts):  # copy shared prefills to every row that asked for them
            expand = torch.tensor(unique, device=self.device)
            cache.batch_select_indices(expand)
            logits, attention, positions = logits[expand], attention[expand], positions[expand]
        outputs: list[list[int]] = [[] for _ in prompts]
        alive = torch.arange(len(prompts))  # original row of each batch row
        stop_ids = self.stop_ids.to(self.device)
        for _ in range(params.max_new_tokens):
            tokens = sample_next(logits.cpu(), params.temperature, params.top_p, generator)
            for row, token in zip(alive.tolist(), tokens.tolist()):
                outputs[row].append(token)
            keep = ~torch.isin(tokens.to(self.device), stop_ids)
            if not keep.all():
                if not keep.any():
                    break
                index = keep.nonzero().squeeze(-1)
                cache.batch_select_indices(index)
                alive, tokens = alive[index.cpu()], tokens[index.cpu()]
                attention, positions = attention[index], positions[index]
            attention = torch.cat([attention, attention.new_ones((len(alive), 1))], dim=-1)
            positions = positions[:, -1:] + 1
            logits, cache = self._forward(tokens.view(-1, 1).to(self.device), attention, positions, cache)
        return outputs
