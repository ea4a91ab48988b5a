"""Latent-memory evaluation: the frozen teacher *acting* with composed latent context.

Training deploys only the student. This asks a different question of a LOPD run: what is the
latent context alone worth? The frozen initial policy (the teacher, warm start included) plays
each held-out task with the latents the run's composer builds from the run's experience bank
for that task, placed as in training (``method.latent_placement``), and is scored like any
policy (``lopd eval --run RUN --latent-memory``). Comparing it with the same model without
context (``lopd eval`` on the warm start) isolates the context's effect.

``LatentMemoryBackend`` is a generation backend (``generate(prompts, params)``): it recognises
each episode by its initial prompt (registered with the task's latents), splices the latents
into the prompt's input embeddings, prefills, and decodes with a KV cache. It has no cross-turn
prefix cache (each round prefills the whole conversation), so it is slower than ``HFBackend``.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path

import torch

from lopd.generation import SamplingParams, sample_next
from lopd.teacher import adapters_disabled


class LatentMemoryBackend:
    """Decode with ``model`` (adapters disabled: the initial weights) and per-task latents."""

    def __init__(self, model, stop_ids: set[int], pad_id: int, placement, autocast: bool = False):
        self.model = model
        self.stop_ids = set(stop_ids)
        self.pad_id = pad_id
        self.placement = placement
        self.autocast = autocast
        self.device = next(model.parameters()).device
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        names = inspect.signature(base.forward).parameters  # transformers 5: `cache`
        self._cache_arg = "cache" if "cache" in names else "past_key_values"
        self._latents: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    def register(self, prompt_ids: Sequence[int], latent: torch.Tensor, mask: torch.Tensor) -> None:
        """Episodes whose conversation starts with ``prompt_ids`` get ``latent (C, d)`` with
        ``mask (C,)`` (real slots)."""
        self._latents[tuple(prompt_ids)] = (latent.detach(), mask.bool())

    def _find(self, ids: list[int]) -> tuple[int, tuple[torch.Tensor, torch.Tensor] | None]:
        for length in sorted({len(k) for k in self._latents}, reverse=True):
            found = self._latents.get(tuple(ids[:length]))
            if found is not None:
                return length, found
        return 0, None

    def _row_embeds(self, ids: list[int]) -> torch.Tensor:
        """``(L, d)``: the row's token embeddings with its latents (framed) spliced in."""
        embed = self.model.get_input_embeddings()
        tokens = torch.tensor(ids, dtype=torch.long, device=self.device)
        embeds = embed(tokens)
        prompt_len, found = self._find(ids)
        if found is None or not bool(found[1].any()):
            return embeds
        latent, mask = found
        context, context_mask = self.placement.wrap(latent[None].to(embeds.dtype), mask[None],
                                                    embed)
        at = int(self.placement.insert_positions(tokens[None], torch.tensor([prompt_len]))[0])
        real = context[0][context_mask[0]]
        return torch.cat([embeds[:at], real.to(embeds.dtype), embeds[at:]])

    def _forward(self, **kwargs):
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            out = self.model(use_cache=True, logits_to_keep=1, **kwargs)
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.logits[:, -1].float(), cache

    @torch.no_grad()
    def generate(self, prompts: Sequence[list[int]], params: SamplingParams) -> list[list[int]]:
        if not prompts:
            return []
        rows = [self._row_embeds(list(p)) for p in prompts]
        width = max(r.shape[0] for r in rows)
        d = rows[0].shape[1]
        embeds = rows[0].new_zeros((len(rows), width, d))
        attention = torch.zeros((len(rows), width), dtype=torch.long, device=self.device)
        for index, row in enumerate(rows):  # left padding
            embeds[index, width - row.shape[0]:] = row
            attention[index, width - row.shape[0]:] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        generator = torch.Generator(device="cpu").manual_seed(params.seed)
        outputs: list[list[int]] = [[] for _ in prompts]
        done = [False] * len(prompts)
        with adapters_disabled(self.model):
            logits, cache = self._forward(inputs_embeds=embeds, attention_mask=attention,
                                          position_ids=positions)
            for step in range(params.max_new_tokens):
                tokens = sample_next(logits.cpu(), params.temperature, params.top_p, generator,
                                     params.top_k)
                for index, token in enumerate(tokens.tolist()):
                    if not done[index]:
                        outputs[index].append(token)
                        done[index] = token in self.stop_ids
                if all(done) or step == params.max_new_tokens - 1:
                    break
                attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=-1)
                positions = positions[:, -1:] + 1
                logits, cache = self._forward(input_ids=tokens.view(-1, 1).to(self.device),
                                              attention_mask=attention, position_ids=positions,
                                              **{self._cache_arg: cache})
        return outputs


def initial_prompt_ids(task, renderer, max_steps: int) -> list[int]:
    """The token ids an episode of ``task`` starts with (as the rollout engine renders them)."""
    from lopd.envs import make_env

    first = make_env(task, max_steps=max_steps).reset()
    ids, _ = renderer.render(first.messages)
    return ids


def latent_memory_backend(rt, tasks, max_steps: int, chunk: int = 8) -> LatentMemoryBackend:
    """A backend over a built LOPD runtime's frozen teacher, with every task's latents
    composed from the run's bank (the task's own rows excluded, as in training)."""
    teacher = rt.teacher_model if rt.teacher_model is not None else rt.model
    backend = LatentMemoryBackend(teacher, rt.renderer.stop_ids, rt.pad_id, rt.placement,
                                  autocast=rt.dtype == "bf16-autocast")
    for start in range(0, len(tasks), chunk):
        part = tasks[start:start + chunk]
        texts = rt.provider.retrieve_texts(part, step=None)
        with torch.no_grad():
            latent, mask = rt.composer.compose([t.prompt for t in part], texts)
        for row, task in enumerate(part):
            backend.register(initial_prompt_ids(task, rt.renderer, max_steps), latent[row],
                             mask[row])
    return backend


def build_run_runtime(run_dir: str | Path, threads: int = 2, device: str = ""):
    """A LOPD run's runtime as it stands: warm start merged, bank, newest composer (the
    checkpoint's, else phi_0), never re-running the cold start."""
    from lopd.checkpoint import latest_checkpoint
    from lopd.config import load_config
    from lopd.runtime_build import build_runtime

    run = Path(run_dir)
    config = load_config(run / "config.yaml")
    if config.method.name != "lopd" or config.method.context != "latent":
        raise ValueError(f"{run} is not a LOPD run with latent context; --latent-memory needs one")
    config.method.cold_start_steps = 0
    config.run.threads = threads
    if device:
        config.model.device = device
    rt = build_runtime(config, run)
    checkpoint = latest_checkpoint(run)
    if checkpoint is not None and (checkpoint / "composer").is_dir():
        rt.composer.load(checkpoint / "composer")
    return rt
