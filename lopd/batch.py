"""Pad trajectories into tensors and align logits with the tokens they predict.

Alignment convention used everywhere in lopd: a forward pass over ``input_ids (B, T)`` gives
``logits (B, T, V)`` where ``logits[:, i]`` is the distribution of token ``i + 1``. The helpers
here return *target-aligned* views: ``targets (B, T-1)`` = ``input_ids[:, 1:]``,
``target_mask (B, T-1)`` = ``action_mask[:, 1:]`` and logits ``[:, :-1]``. Losses take
target-aligned tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lopd.types import Trajectory


@dataclass
class TokenBatch:
    """Right-padded token tensors for a list of trajectories.

    input_ids      (B, T) long
    attention_mask (B, T) long, 1 on real tokens
    action_mask    (B, T) bool, True on sampled (supervised) tokens
    prompt_lens    (B,)   long, where privileged context is inserted
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    action_mask: torch.Tensor
    prompt_lens: torch.Tensor

    @property
    def targets(self) -> torch.Tensor:
        """(B, T-1) the token each logit position predicts."""
        return self.input_ids[:, 1:]

    @property
    def target_mask(self) -> torch.Tensor:
        """(B, T-1) True where the predicted token is a supervised action token."""
        return self.action_mask[:, 1:]

    def to(self, device: torch.device | str) -> TokenBatch:
        return TokenBatch(*(t.to(device) for t in (
            self.input_ids, self.attention_mask, self.action_mask, self.prompt_lens)))


def collate(trajectories: Sequence[Trajectory], pad_id: int,
            through_last_action: bool = False) -> TokenBatch:
    """Right-pad a list of trajectories into a ``TokenBatch``.

    ``through_last_action`` drops each row's tokens after its last action token (an episode
    cut at its turn limit ends with the environment's last observation): no supervised logit
    of a causal model depends on them, so training forwards skip them at no change in the loss.
    """
    if not trajectories:
        raise ValueError("collate needs at least one trajectory")
    for traj in trajectories:
        if len(traj.action_mask) != len(traj.input_ids):
            raise ValueError(f"trajectory {traj.task.id}: action_mask and input_ids differ in length")
    kept = [forwarded_length(t, through_last_action) for t in trajectories]
    length = max(kept)
    batch = len(trajectories)
    input_ids = torch.full((batch, length), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, length), dtype=torch.long)
    action = torch.zeros((batch, length), dtype=torch.bool)
    for row, (traj, n) in enumerate(zip(trajectories, kept)):
        input_ids[row, :n] = torch.tensor(traj.input_ids[:n], dtype=torch.long)
        attention[row, :n] = 1
        action[row, :n] = torch.tensor(traj.action_mask[:n], dtype=torch.bool)
    prompt_lens = torch.tensor([t.prompt_len for t in trajectories], dtype=torch.long)
    return TokenBatch(input_ids, attention, action, prompt_lens)


def forwarded_length(traj: Trajectory, through_last_action: bool) -> int:
    """The tokens of ``traj`` that ``collate`` puts in its row."""
    return kept_length(traj) if through_last_action else len(traj.input_ids)


def kept_length(traj: Trajectory) -> int:
    """Tokens up to and including the last action token (all of them if there is none)."""
    for index in range(len(traj.action_mask) - 1, -1, -1):
        if traj.action_mask[index]:
            return index + 1
    return len(traj.input_ids)


def gather_token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) per position: ``logits (B, T, V)``, ``targets (B, T)`` -> ``(B, T)``.

    Computed as ``logit[target] - logsumexp(logits)`` in fp32 so the full log-softmax is never
    materialised.
    """
    logits = logits.float()
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)
