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
  dropped, so the remaining rows decode at the cost of a smaller batch;
- cross-turn prefix reuse (``prefix_cache=True``): the rollout engine sends each episode's whole
  conversation every round, and the previous round's prompt plus sampled turn is a prefix of
  it. A row leaving the batch stores its KV (real positions only, no padding) under the exact
  token ids it covers; the next call looks every prompt up (longest stored sequence that
  starts it) and prefills only the rest: the tool result and the next turn header. Rows are
  batched as ``[pad, stored KV, pad, new tokens]`` with zeros in the attention mask at both
  paddings and position ids that count real tokens, so each row computes what an unpadded
  run would (up to float rounding). Only the latest call's sequences are kept, at most
  ``max_cached_tokens`` of them.

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
    """Batched KV-cache decoding with a transformers model (see the module docstring).

    The prefix cache assumes the model computes the same function between calls: it is cleared
    when a parameter changes in place (optimizer step, merge) or the active adapter changes;
    call ``reset_prefix_cache()`` after any other change (``disable_adapter()``, say).
    """

    def __init__(self, model, stop_ids: set[int], pad_id: int, autocast: bool = False,
                 prefix_cache: bool = True, max_cached_tokens: int = 131_072):
        self.model = model
        self.stop_ids = torch.tensor(sorted(stop_ids), dtype=torch.long)
        self.pad_id = pad_id
        self.autocast = autocast
        self.prefix_cache = prefix_cache
        self.max_cached_tokens = max_cached_tokens
        self.device = next(model.parameters()).device
        # transformers 5.x names the KV cache argument `cache`; 4.x called it `past_key_values`.
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        params = inspect.signature(base.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self.reused_tokens = 0  # prompt tokens served from the prefix cache, over all calls
        self.prefilled_tokens = 0  # prompt tokens run through a prefill, over all calls
        self.reset_prefix_cache()

    def reset_prefix_cache(self) -> None:
        """Forget every stored sequence."""
        # token ids -> KV (2 * layers, kv_heads, len(ids), head_dim): every layer's keys, then values
        self._entries: dict[tuple[int, ...], torch.Tensor] = {}
        self._fingerprint = self._weights_fingerprint()

    def _weights_fingerprint(self) -> tuple[int, str]:
        versions = sum(p._version for p in self.model.parameters())  # bumped by in-place updates
        adapter = getattr(self.model, "active_adapter", None)  # PEFT: a name or a list of names
        return versions, repr(adapter) if isinstance(adapter, (str, list, tuple)) else ""

    def _lookup(self, prompt: list[int]) -> torch.Tensor | None:
        """KV of the longest stored sequence that starts ``prompt``, leaving >= 1 token to run."""
        for length in sorted({len(ids) for ids in self._entries}, reverse=True):
            entry = self._entries.get(tuple(prompt[:length])) if length <= len(prompt) else None
            if entry is not None:
                return entry[:, :, :min(length, len(prompt) - 1)] if len(prompt) > 1 else None
        return None

    def _store(self, fresh: dict, cache, attention, batch_rows, sequences) -> None:
        """Copy the KV of ``batch_rows`` (real positions only) into ``fresh``, keyed by ids."""
        from transformers.cache_utils import DynamicLayer

        layers = getattr(cache, "layers", None)
        if not self.prefix_cache or not layers or any(type(x) is not DynamicLayer for x in layers):
            return  # sliding-window or other special layers do not keep the whole sequence
        tensors = [layer.keys for layer in layers] + [layer.values for layer in layers]
        stored = sum(len(ids) for ids in fresh)
        for row, sequence in zip(batch_rows, sequences):
            real = attention[row].bool()
            covered = tuple(sequence[:int(real.sum())])
            if covered in fresh or stored + len(covered) > self.max_cached_tokens:
                continue
            fresh[covered] = torch.stack([t[row][:, real] for t in tensors])
            stored += len(covered)

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

    def _prefill(self, prompts: list[list[int]]):
        """Prefill distinct prompts, each continuing its stored prefix if there is one.

        Returns the last-position logits, the cache, the attention mask and the position ids.
        """
        from transformers.cache_utils import DynamicCache

        pasts = [self._lookup(p) if self.prefix_cache else None for p in prompts]
        self._entries = {}  # this call's sequences supersede them
        reused = [0 if kv is None else kv.shape[2] for kv in pasts]
        ids, new_mask = self._left_pad([p[n:] for p, n in zip(prompts, reused)])
        self.reused_tokens += sum(reused)
        self.prefilled_tokens += sum(len(p) - n for p, n in zip(prompts, reused))
        width = max(reused)
        past_mask = new_mask.new_zeros((len(prompts), width))
        for row, n in enumerate(reused):
            past_mask[row, width - n:] = 1  # empty slice when n == 0
        attention = torch.cat([past_mask, new_mask], dim=-1)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        cache = None
        if width:  # stored KV left-padded to the common past length, one layer at a time
            first = next(kv for kv in pasts if kv is not None)
            batch_shape = (len(prompts), first.shape[1], width, first.shape[3])

            def padded(index: int) -> torch.Tensor:
                batch = first.new_zeros(batch_shape)
                for row, kv in enumerate(pasts):
                    if kv is not None:
                        batch[row, :, width - kv.shape[2]:] = kv[index]
                return batch

            layers = first.shape[0] // 2
            cache = DynamicCache(ddp_cache_data=(
                (padded(i), padded(layers + i)) for i in range(layers)))
        logits, cache = self._forward(ids, attention, positions[:, width:], cache)
        return logits, cache, attention, positions

    @torch.no_grad()
    def generate(self, prompts: Sequence[list[int]], params: SamplingParams) -> list[list[int]]:
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if self._weights_fingerprint() != self._fingerprint:
            self.reset_prefix_cache()  # the weights changed: stored KV is stale
        generator = torch.Generator(device="cpu").manual_seed(params.seed)
        first_of: dict[tuple[int, ...], int] = {}
        unique = [first_of.setdefault(tuple(p), len(first_of)) for p in prompts]
        logits, cache, attention, positions = self._prefill([list(p) for p in first_of])
        if len(first_of) < len(prompts):  # copy shared prefills to every row that asked for them
            expand = torch.tensor(unique, device=self.device)
            cache.batch_select_indices(expand)
            logits, attention, positions = logits[expand], attention[expand], positions[expand]
        outputs: list[list[int]] = [[] for _ in prompts]
        alive = torch.arange(len(prompts))  # original row of each batch row
        stop_ids = self.stop_ids.to(self.device)
        fresh: dict[tuple[int, ...], torch.Tensor] = {}  # the prefix cache after this call

        def store(batch_rows: torch.Tensor) -> None:  # reads the loop's current cache/attention
            rows = alive[batch_rows.cpu()].tolist()  # the cache lacks the last sampled token
            self._store(fresh, cache, attention, batch_rows.tolist(),
                        [list(prompts[r]) + outputs[r] for r in rows])

        for step in range(params.max_new_tokens):
            tokens = sample_next(logits.cpu(), params.temperature, params.top_p, generator)
            for row, token in zip(alive.tolist(), tokens.tolist()):
                outputs[row].append(token)
            if step == params.max_new_tokens - 1:
                break  # the budget is spent: no need to feed the last token back
            keep = ~torch.isin(tokens.to(self.device), stop_ids)
            if not keep.all():
                store((~keep).nonzero().squeeze(-1))
                index = keep.nonzero().squeeze(-1)
                if not keep.any():
                    alive = alive[:0]
                    break
                cache.batch_select_indices(index)
                alive, tokens = alive[index.cpu()], tokens[index.cpu()]
                attention, positions = attention[index], positions[index]
            attention = torch.cat([attention, attention.new_ones((len(alive), 1))], dim=-1)
            positions = positions[:, -1:] + 1
            logits, cache = self._forward(tokens.view(-1, 1).to(self.device), attention,
                                          positions, cache)
        store(torch.arange(len(alive)))
        self._entries = fresh
        return outputs
