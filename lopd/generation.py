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
- sync points (``sync_every``, 1 on a CPU, 8 elsewhere): on a GPU, reading each step's token
  back to the host stalls the device every step. With ``sync_every = N > 1`` tokens are sampled
  on the device (``sample_rows``, a device generator) and read back once every N steps. A row
  that samples a stop id is marked done on the device and stays in the batch until the next
  sync point: its stop id, then the pad id, are fed with 0 in the attention mask, so its KV
  gains only masked positions and the other rows compute what they would without it. At the sync point the
  outputs are cut at each row's first stop id and finished rows leave the batch; the prefix
  cache stores their real positions only (it reads the attention mask), as stepwise decoding
  does. Greedy outputs and the prefix cache are those of ``N = 1``. Sampled draws differ from
  ``N = 1`` once a row stops early: ``N = 1`` draws noise for the rows still decoding (the
  stream of earlier versions), ``N > 1`` for every row of the call, so a row's draws do not
  depend on when the others leave and every ``N > 1`` samples the same tokens. The decode
  forward then gets a 4D mask (sdpa, full attention): from a 2D one, transformers reads back
  whether any position is masked, one more wait per step. Not done: CUDA graphs and
  ``torch.compile`` (shapes change at every sync point; no GPU measured them).

``GenerationBackend`` is the seam for other engines (``lopd.vllm_backend``): anything with
``generate(prompts, params) -> list[list[int]]`` drives the rollout engine.
"""

from __future__ import annotations

import functools
import inspect
import itertools
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
    top_k: int = 0
    """Sample among the ``top_k`` most likely tokens only (0 = off)."""


def common_prefixes(prompts: Sequence[list[int]], minimum: int) -> list[tuple[list[int], list[list[int]]]]:
    """Groups of two or more prompts that share a prefix of at least ``minimum`` tokens, each
    as (that prefix, its prompts); the prefix leaves at least one token of every prompt to
    run. Prompts are grouped as neighbours in sorted order."""
    def shared(a: list[int], b: list[int]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    order = sorted(prompts)
    groups: list[list[list[int]]] = [[order[0]]] if order else []
    lengths: list[int] = [len(order[0])] if order else []
    for previous, prompt in itertools.pairwise(order):
        common = shared(previous, prompt)
        if common >= minimum:
            groups[-1].append(prompt)
            lengths[-1] = min(lengths[-1], common)
        else:
            groups.append([prompt])
            lengths.append(len(prompt))
    found = []
    for group, length in zip(groups, lengths):
        length = min(length, min(len(p) for p in group) - 1)
        if len(group) > 1 and length >= minimum:
            found.append((group[0][:length], group))
    return found


@functools.cache
def _preallocated_layer() -> type:
    """transformers' ``DynamicLayer`` with its keys and values in a buffer allocated once per
    call with room for the whole turn: appending a token writes one slot instead of
    concatenating the layer's whole cache (a copy that grows with the context). ``keys`` /
    ``values`` are views of the filled part, so attention reads the same numbers."""
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        def __init__(self, capacity: int):
            super().__init__()
            self.capacity = capacity

        def lazy_initialization(self, key_states, value_states):
            batch, heads, _, dim = key_states.shape
            self.device = key_states.device
            self._keys = key_states.new_empty((batch, heads, self.capacity, dim))
            self._values = value_states.new_empty((batch, heads, self.capacity,
                                                   value_states.shape[-1]))
            self.keys, self.values = self._keys[:, :, :0], self._values[:, :, :0]
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            start = self.keys.shape[-2]
            end = start + key_states.shape[-2]
            if end > self._keys.shape[-2]:  # past the planned room: double it
                self._keys = torch.cat([self._keys, torch.empty_like(self._keys)], dim=-2)
                self._values = torch.cat([self._values, torch.empty_like(self._values)], dim=-2)
                return self.update(key_states, value_states)
            self._keys[:, :, start:end] = key_states
            self._values[:, :, start:end] = value_states
            self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
            return self.keys, self.values

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self.is_initialized:
                end = self.keys.shape[-2]
                self._keys, self._values = self._keys[indices], self._values[indices]
                self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]

    return PreallocatedLayer


def _full_attention_only(model) -> bool:
    """True when every layer attends to the whole sequence (no sliding window, no linear
    attention): the only layers the preallocated cache stands in for."""
    config = model.config.get_text_config(decoder=True) if hasattr(model, "config") else None
    if config is None:
        return False
    types = getattr(config, "layer_types", None)
    if types is not None:
        return all(t == "full_attention" for t in types)
    return not getattr(config, "sliding_window", None) or not getattr(
        config, "use_sliding_window", True)


class GenerationBackend(Protocol):
    def generate(self, prompts: Sequence[list[int]], params: SamplingParams) -> list[list[int]]:
        """Sampled ids per prompt; each ends with a stop id unless the budget ran out."""
        ...


def _probabilities(logits: torch.Tensor, temperature: float, top_p: float,
                   top_k: int) -> torch.Tensor:
    """``softmax(logits / temperature)`` over ``(B, V)``, restricted to the top-k then top-p set."""
    logits = logits.float() / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = sorted_probs.cumsum(-1) - sorted_probs < top_p  # always keeps the top token
        sorted_probs = sorted_probs * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return probs


def _inverse_cdf(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """One draw per row of ``probs (B, V)`` from one uniform number per row ``(B,)``: the first
    token whose cumulative probability exceeds ``u * total``. Tokens of zero probability own an
    empty interval and are never drawn; ``u * total`` is kept below the total, where float
    rounding could otherwise reach it."""
    cdf = probs.cumsum(dim=-1)
    total = cdf[:, -1:]
    point = torch.minimum(uniform[:, None].to(cdf.dtype) * total,
                          torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, point, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)


def sample_next(logits: torch.Tensor, temperature: float, top_p: float,
                generator: torch.Generator | None, top_k: int = 0) -> torch.Tensor:
    """Sample one token per row from ``logits (B, V)``; greedy when ``temperature == 0``.

    Filters apply in the usual order: temperature, then top-k (the ``top_k`` largest logits
    stay; 0 = off), then top-p (the smallest set of the remaining tokens whose probability
    reaches ``top_p``; 1 = off). The draw inverts each row's cumulative distribution at one
    uniform number: on a CPU that costs a cumulative sum, where ``torch.multinomial`` draws an
    exponential number per vocabulary entry (34 ms a step at 24 rows x 49k ids here,
    benchmarks/results/throughput.md).
    """
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = _probabilities(logits, temperature, top_p, top_k)
    uniform = torch.rand(probs.shape[0], generator=generator, device=probs.device)
    return _inverse_cdf(probs, uniform)


def sample_rows(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None,
                rows: torch.Tensor, num_rows: int) -> torch.Tensor:
    """``sample_next`` without reading anything back to the host, each row's draw independent
    of which other rows are still in the batch.

    ``rows (B,)``: the original row (of ``num_rows``) of each batch row. Every step draws
    ``num_rows`` uniform numbers and batch row ``b`` inverts its distribution at number
    ``rows[b]``. With ``rows = arange(num_rows)`` it draws exactly what ``sample_next`` does
    from the same generator.
    """
    if params.temperature <= 0:
        return logits.argmax(dim=-1)
    probs = _probabilities(logits, params.temperature, params.top_p, params.top_k)
    uniform = torch.rand(num_rows, generator=generator, device=probs.device)
    return _inverse_cdf(probs, uniform[rows])


def _to_device(index: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CPU index tensor on ``device`` with no host sync (pinned, non-blocking copy)."""
    if device.type == "cpu":
        return index
    if device.type == "cuda":
        index = index.pin_memory()
    return index.to(device, non_blocking=True)


class HFBackend:
    """Batched KV-cache decoding with a transformers model (see the module docstring).

    The prefix cache assumes the model computes the same function between calls: it is cleared
    when a parameter changes in place (optimizer step, merge) or the active adapter changes;
    call ``reset_prefix_cache()`` after any other change (``disable_adapter()``, say).

    ``sync_every``: steps between two reads of the sampled tokens back to the host (None: 1 on
    a CPU, where that read costs nothing and the sampled stream stays that of earlier versions;
    8 on other devices). See "sync points" in the module docstring.
    """

    def __init__(self, model, stop_ids: set[int], pad_id: int, autocast: bool = False,
                 prefix_cache: bool = True, max_cached_tokens: int = 131_072,
                 preallocate: bool = True, sync_every: int | None = None):
        self.model = model
        self.stop_ids = torch.tensor(sorted(stop_ids), dtype=torch.long)
        self.pad_id = pad_id
        self.autocast = autocast
        self.prefix_cache = prefix_cache
        self.max_cached_tokens = max_cached_tokens
        self.preallocate = preallocate and _full_attention_only(model)
        self.device = next(model.parameters()).device
        if sync_every is None:  # the host is the device on a CPU: nothing to save there
            sync_every = 1 if self.device.type == "cpu" else 8
        if sync_every < 1:
            raise ValueError(f"sync_every must be >= 1, got {sync_every}")
        self.sync_every = sync_every
        config = getattr(model, "config", None)
        self._sdpa_full_attention = _full_attention_only(model) and getattr(
            config, "_attn_implementation", None) == "sdpa"
        # transformers 5.x names the KV cache argument `cache`; 4.x called it `past_key_values`.
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        params = inspect.signature(base.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self.min_shared_prefix = 16  # shortest common prefix of a call worth a prefill of its own
        self.shared_tokens = 0  # prompt tokens prefilled once for all of a call's prompts
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
        """Copy the KV of ``batch_rows`` (real positions only) into ``fresh``, keyed by ids: one
        read of their masks to the host, then device-side gathers (one sync per store)."""
        from transformers.cache_utils import DynamicLayer

        layers = getattr(cache, "layers", None)
        plain = (DynamicLayer, _preallocated_layer())
        if not self.prefix_cache or not layers or any(type(x) not in plain for x in layers):
            return  # sliding-window or other special layers do not keep the whole sequence
        if not batch_rows:
            return
        tensors = [layer.keys for layer in layers] + [layer.values for layer in layers]
        stored = sum(len(ids) for ids in fresh)
        real_rows = attention[batch_rows].bool().cpu()  # the one read back to the host
        for row, sequence, real in zip(batch_rows, sequences, real_rows):
            positions = real.nonzero().view(-1)
            covered = tuple(sequence[:len(positions)])
            if covered in fresh or stored + len(covered) > self.max_cached_tokens:
                continue
            fresh[covered] = torch.stack([t[row] for t in tensors]).index_select(
                2, _to_device(positions, tensors[0].device))
            stored += len(covered)

    def _left_pad(self, prompts: Sequence[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        length = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), length), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), length), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, length - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
            attention[row, length - len(prompt):] = 1
        return ids.to(self.device), attention.to(self.device)

    def _forward(self, ids, attention, positions, cache, mask_4d: bool = False):
        """Last-position logits and the cache. ``mask_4d`` (one new token per row, full sdpa
        attention): pass the mask sdpa gets, ``(B, 1, 1, T)`` booleans, so transformers does
        not read the 2D mask back to the host to see whether it may drop it."""
        if mask_4d and self._sdpa_full_attention:
            attention = attention.bool()[:, None, None, :]
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            out = self.model(
                input_ids=ids, attention_mask=attention, position_ids=positions,
                use_cache=True, logits_to_keep=1, **{self._cache_arg: cache},
            )
        new_cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.logits[:, -1].float(), new_cache

    def _prefill(self, prompts: list[list[int]], room: int = 0):
        """Prefill distinct prompts, each continuing its stored prefix if there is one.

        ``room``: tokens the caller will append; with ``preallocate`` the cache has space for
        them. Returns the last-position logits, the cache, the attention mask and the position
        ids.
        """
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
        cache = self._new_cache(pasts, width, attention.shape[1] + room)
        logits, cache = self._forward(ids, attention, positions[:, width:], cache)
        return logits, cache, attention, positions

    def _new_cache(self, pasts: list[torch.Tensor | None], width: int, capacity: int):
        """A cache holding the stored KV of each row left-padded to ``width`` (None: the model
        makes its own); preallocated for ``capacity`` positions when enabled."""
        from transformers.cache_utils import DynamicCache

        if not width and not self.preallocate:
            return None
        layer = functools.partial(_preallocated_layer(), capacity) if self.preallocate else None
        cache = DynamicCache()
        if layer is not None:
            cache.layer_class_to_replicate = layer
        if not width:
            return cache
        first = next(kv for kv in pasts if kv is not None)
        batch_shape = (len(pasts), first.shape[1], width, first.shape[3])

        def padded(index: int) -> torch.Tensor:
            batch = first.new_zeros(batch_shape)
            for row, kv in enumerate(pasts):
                if kv is not None:
                    batch[row, :, width - kv.shape[2]:] = kv[index]
            return batch

        layers = first.shape[0] // 2
        for i in range(layers):  # stored KV left-padded to the common past length
            cache.update(padded(i), padded(layers + i), i)
        return cache

    def _store_common_prefixes(self, prompts: list[list[int]]) -> None:
        """Prefill once, as one row each, the prefixes that groups of ``prompts`` share (the
        system prompt of a domain's tasks) and store them, so the prefill continues every
        prompt of a group from its prefix; groups the cache already covers are left alone."""
        wanted = []
        for prefix, members in common_prefixes(prompts, self.min_shared_prefix):
            pasts = [self._lookup(p) for p in members]
            if any(kv is None or kv.shape[2] < len(prefix) for kv in pasts):
                wanted.append(prefix)
        if not wanted:
            return
        ids, attention = self._left_pad(wanted)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        _, cache = self._forward(ids, attention, positions,
                                 self._new_cache([], 0, ids.shape[1]))
        fresh: dict[tuple[int, ...], torch.Tensor] = {}
        self._store(fresh, cache, attention, list(range(len(wanted))), wanted)
        self._entries.update(fresh)
        self.prefilled_tokens += sum(len(ids) for ids in fresh)
        self.shared_tokens += sum(len(ids) for ids in fresh)

    @torch.no_grad()
    def generate(self, prompts: Sequence[list[int]], params: SamplingParams) -> list[list[int]]:
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if self._weights_fingerprint() != self._fingerprint:
            self.reset_prefix_cache()  # the weights changed: stored KV is stale
        first_of: dict[tuple[int, ...], int] = {}
        unique = [first_of.setdefault(tuple(p), len(first_of)) for p in prompts]
        if self.prefix_cache and len(first_of) > 1:
            self._store_common_prefixes([list(p) for p in first_of])
        logits, cache, attention, positions = self._prefill([list(p) for p in first_of],
                                                            params.max_new_tokens)
        if len(first_of) < len(prompts):  # copy shared prefills to every row that asked for them
            expand = _to_device(torch.tensor(unique), self.device)
            cache.batch_select_indices(expand)
            logits, attention, positions = logits[expand], attention[expand], positions[expand]
        return self._decode(prompts, params, logits, cache, attention, positions)

    def _decode(self, prompts, params: SamplingParams, logits, cache, attention, positions):
        """Sample up to ``params.max_new_tokens`` per row after the prefill (module docstring,
        "sync points"); leaves the prefix cache holding this call's sequences."""
        stepwise = self.sync_every == 1
        # stepwise: the tokens go to the host at every step anyway, so they are sampled there
        generator = torch.Generator(device="cpu" if stepwise else self.device)
        generator.manual_seed(params.seed)
        stop_ids = self.stop_ids.to(self.device)
        outputs: list[list[int]] = [[] for _ in prompts]
        alive = torch.arange(len(prompts))  # original row of each batch row
        rows = alive.to(self.device)
        done = torch.zeros(len(prompts), dtype=torch.bool, device=self.device)  # (B,) stopped
        window: list[torch.Tensor] = []  # (B,) tokens of each step since the last sync point
        fresh: dict[tuple[int, ...], torch.Tensor] = {}  # the prefix cache after this call
        rest = list(range(len(prompts)))  # batch rows still decoding when the loop ends

        def store(batch_rows: list[int]) -> None:  # reads the loop's current cache/attention
            sequences = [list(prompts[r]) + outputs[r] for r in alive[batch_rows].tolist()]
            self._store(fresh, cache, attention, batch_rows, sequences)  # cache lacks the last

        for step in range(params.max_new_tokens):
            if stepwise:
                tokens = sample_next(logits.cpu(), params.temperature, params.top_p, generator,
                                     params.top_k).to(self.device)
            else:
                tokens = sample_rows(logits, params, generator, rows, len(prompts))
            tokens = tokens.masked_fill(done, self.pad_id)  # (B,)
            window.append(tokens)
            # not torch.isin: with many stop ids it sorts on the device and syncs every step
            done = done | (tokens[:, None] == stop_ids).any(dim=-1)
            last = step == params.max_new_tokens - 1
            if not last and (step + 1) % self.sync_every:
                attention = torch.cat([attention, (~done)[:, None].to(attention.dtype)], dim=-1)
            else:  # a sync point: the one read of the window back to the host
                stopped = self._collect(outputs, alive, torch.stack(window, dim=1))
                finished = [b for end, b in stopped if not last or end < len(window) - 1]
                window = []
                if last:  # the budget is spent: no need to feed the last token back
                    store(finished)
                    rest = sorted(set(range(len(alive))) - set(finished))  # in batch order
                    break
                if finished:
                    store(finished)
                    index = sorted(set(range(len(alive))) - set(finished))
                    if not index:
                        rest = []
                        break
                    alive = alive[index]
                    index = _to_device(torch.tensor(index), self.device)
                    cache.batch_select_indices(index)
                    attention, positions = attention[index], positions[index]
                    tokens, rows, done = tokens[index], rows[index], done[index]
                attention = torch.cat([attention, attention.new_ones((len(alive), 1))], dim=-1)
            positions = positions[:, -1:] + 1
            logits, cache = self._forward(tokens.view(-1, 1), attention, positions, cache,
                                          mask_4d=not stepwise)
        store(rest)  # as stepwise decoding stores them
        self._entries = fresh
        return outputs

    def _collect(self, outputs: list[list[int]], alive: torch.Tensor,
                 window: torch.Tensor) -> list[tuple[int, int]]:
        """Append each batch row's tokens of ``window (B, steps)`` to its output, up to and
        including its first stop id. Returns (step in the window, batch row) of the rows that
        stopped, in the order stepwise decoding meets them (by step, then by row)."""
        stops = set(self.stop_ids.tolist())
        finished = []
        for b, (row, tokens) in enumerate(zip(alive.tolist(), window.tolist())):
            end = next((i for i, t in enumerate(tokens) if t in stops), None)
            outputs[row].extend(tokens if end is None else tokens[:end + 1])
            if end is not None:
                finished.append((end, b))
        return sorted(finished)
