"""Where the latent context enters the teacher's input, and what text surrounds it.

Two placements (``method.latent_placement``):

- ``after_prompt`` (lopd's default, the paper's ``[s ; c]`` of eq. 7): the bare ``J*K`` latent
  vectors right after the task prompt (system message + first user message), before the first
  assistant turn.
- ``framed`` (the authors' published code): the latents sit *inside* the first user message,
  before the task text, between two plain-text sentences: one saying that what follows is a
  reference example of how a different task was handled, one closing it and telling the model
  to now do its own task. The sentences are lopd's own wording.

Both go through the same splice (``lopd.teacher``): ``place`` returns the batch with its
insertion points moved (``prompt_lens`` = where the context goes; the tokens and the loss
positions are unchanged) and the context with the framing embeddings around the latent slots.
The framing embeddings come from the frozen embedding table without gradient; the latent slots
keep theirs, so the composer is trained exactly as before.

The insertion point of ``framed`` is found in the token ids: right after the last
``<|im_start|>user\\n`` header inside the prompt (the first user message's). A tokenizer without
ChatML markers, or a prompt without that header, falls back to ``after_prompt`` for that row.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

PLACEMENTS = ("after_prompt", "framed")
FRAME_BEFORE = ("Below is a reference example showing how a different task was handled. "
                "Use it only as guidance.\n")
FRAME_AFTER = "\nThat was the end of the reference example. Now complete your own task:\n"


@dataclass
class LatentPlacement:
    """How latents are placed for one tokenizer (build with ``LatentPlacement.build``)."""

    mode: str = "after_prompt"
    before_ids: tuple[int, ...] = ()
    after_ids: tuple[int, ...] = ()
    header_ids: tuple[int, ...] = ()

    @classmethod
    def build(cls, mode: str, tokenizer) -> LatentPlacement:
        if mode not in PLACEMENTS:
            raise ValueError(f"latent placement must be one of {PLACEMENTS}, got {mode!r}")
        if mode == "after_prompt":
            return cls(mode)

        def encode(text: str) -> tuple[int, ...]:
            return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])

        vocab = tokenizer.get_vocab()
        header = encode("<|im_start|>user\n") if "<|im_start|>" in vocab else ()
        return cls(mode, encode(FRAME_BEFORE), encode(FRAME_AFTER), header)

    @property
    def framed(self) -> bool:
        return self.mode == "framed"

    def insert_positions(self, input_ids: torch.Tensor, prompt_lens: torch.Tensor) -> torch.Tensor:
        """``(B,)`` where each row's context goes: the prompt's end, or (framed) the start of
        the first user message's text."""
        if not self.framed or not self.header_ids:
            return prompt_lens.clone()
        width = len(self.header_ids)
        positions = prompt_lens.clone()
        for row in range(input_ids.shape[0]):
            ids = input_ids[row, : int(prompt_lens[row])].tolist()
            for start in range(len(ids) - width, -1, -1):
                if tuple(ids[start:start + width]) == self.header_ids:
                    positions[row] = start + width
                    break
        return positions

    def wrap(self, context: torch.Tensor, mask: torch.Tensor, embed) -> tuple[torch.Tensor,
                                                                          torch.Tensor]:
        """``context (n, C, d)``, ``mask (n, C)`` -> the framed context ``(n, Lb+C+La, d)`` and
        its mask. Rows without any real latent slot get no framing either."""
        if not self.framed:
            return context, mask
        n, device = context.shape[0], context.device
        with torch.no_grad():
            ids = torch.tensor(self.before_ids + self.after_ids, dtype=torch.long,
                               device=embed.weight.device)
            frame = embed(ids).to(device=device, dtype=context.dtype)  # (Lb+La, d)
        before = frame[: len(self.before_ids)].expand(n, -1, -1)
        after = frame[len(self.before_ids):].expand(n, -1, -1)
        any_real = mask.any(1, keepdim=True)  # (n, 1)
        framed = torch.cat([before, context, after], dim=1)
        framed_mask = torch.cat([any_real.expand(n, before.shape[1]), mask,
                                 any_real.expand(n, after.shape[1])], dim=1)
        return framed, framed_mask

    def place(self, batch, context: torch.Tensor | None, mask: torch.Tensor | None, embed):
        """``(batch, context, mask)`` ready for ``lopd.teacher.teacher_logits``: the insertion
        points moved and the framing added (identity for ``after_prompt`` or no context)."""
        if not self.framed or context is None or not torch.is_floating_point(context):
            return batch, context, mask
        if mask is None:
            mask = torch.ones(context.shape[:2], dtype=torch.bool, device=context.device)
        context, mask = self.wrap(context, mask, embed)
        moved = self.insert_positions(batch.input_ids, batch.prompt_lens)
        return dataclasses.replace(batch, prompt_lens=moved), context, mask
