"""Tests for lopd.losses' GRPO pieces: group advantages, the clipped policy-gradient loss."""

import math

import pytest
import torch

from lopd import losses as L

torch.set_num_threads(1)

NEG_INF = float("-inf")


def test_group_advantages_hand_values():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    # groups of 2: [1, 0] mean 0.5, sample std sqrt(0.5) -> +-0.5/0.70711 = +-0.70711; [1, 1] -> 0
    adv = L.group_advantages(r, 2, eps=0.0)  # eps=0: the zero-std group must still give 0
    torch.testing.assert_close(adv, torch.tensor([0.70710678, -0.70710678, 0.0, 0.0]))
    torch.testing.assert_close(L.group_advantages(r, 2, normalize_std=False),
                               torch.tensor([0.5, -0.5, 0.0, 0.0]))
    # arbitrary labels, interleaved; same groups as above
    ids = torch.tensor([7, 7, 3, 3])
    torch.testing.assert_close(L.group_advantages(r, ids), L.group_advantages(r, 2))
    torch.testing.assert_close(L.group_advantages(torch.tensor([1.0, 1.0, 0.0, 1.0]),
                                                  torch.tensor([0, 1, 0, 1])),
                               L.group_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), 2)[
                                   torch.tensor([0, 2, 1, 3])])
    assert L.group_advantages(torch.tensor([1.0, 0.0]), 1).abs().sum() == 0  # singleton groups
    with pytest.raises(ValueError):
        L.group_advantages(r, 3)


def test_grpo_on_policy_value_and_reinforce_gradient():
    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(3, 4, generator=g, dtype=torch.float64)).requires_grad_(True)
    adv = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.bool)
    loss = L.grpo_loss(logp, logp.detach(), adv, mask)
    assert loss.item() == pytest.approx(-(1.0 - 0.5) / 2)  # row 2 has no tokens: ignored
    (g_ppo,) = torch.autograd.grad(loss, logp)
    reinforce = -L.masked_mean(adv[:, None] * logp, mask)
    (g_pg,) = torch.autograd.grad(reinforce, logp)
    torch.testing.assert_close(g_ppo, g_pg)


def test_grpo_clipping_hand_case():
    # tokens: (A=+1, r=e^0.5=1.6487) clipped to 1.2 -> surrogate 1.2, zero grad
    #         (A=-1, r=e^0.5)   min(-1.6487, -1.2) = -1.6487 unclipped, grad -A r = 1.6487
    #         (A=+1, r=e^-0.5=0.6065) min(0.6065, 0.8) = 0.6065 unclipped, grad -r
    logp_old = torch.zeros(3, 1, dtype=torch.float64)
    logp_new = torch.tensor([[0.5], [0.5], [-0.5]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)
    mask = torch.ones(3, 1, dtype=torch.bool)
    loss = L.grpo_loss(logp_new, logp_old, adv, mask, clip_eps=0.2)
    e = math.exp(0.5)
    assert loss.item() == pytest.approx(-(1.2 - e + 1 / e) / 3)
    loss.backward()
    torch.testing.assert_close(logp_new.grad.squeeze(-1),
                               torch.tensor([0.0, e / 3, -(1 / e) / 3], dtype=torch.float64))
    assert L.clip_fraction(logp_new, logp_old, adv, mask, 0.2) == pytest.approx(1 / 3)
    # clip-higher: upper bound 1 + 0.7 = 1.7 > e^0.5, so token 0 is no longer clipped
    high = L.grpo_loss(logp_new, logp_old, adv, mask, clip_eps=0.2, clip_eps_high=0.7)
    assert high.item() == pytest.approx(-(e - e + 1 / e) / 3)
    assert L.clip_fraction(logp_new, logp_old, adv, mask, 0.2, 0.7) == 0.0


def test_grpo_padding_with_neg_inf_logp_is_safe():
    logp_new = torch.tensor([[-0.1, NEG_INF]], requires_grad=True)
    logp_old = torch.tensor([[-0.2, NEG_INF]])
    loss = L.grpo_loss(logp_new, logp_old, torch.tensor([1.0]), torch.tensor([[1, 0]]))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp_new.grad).all()


def test_trainer_advantages_follow_the_advantage_std_switch():
    from lopd.config import Config, apply, parse_overrides
    from lopd.trainer import grpo_advantages
    from lopd.types import Task, Trajectory

    task = Task("t", "train", "d", "p")
    trajs = [Trajectory(task, [1], [1], [(0, 1)], 0, [], group=g, reward=r)
             for g, r in ((0, 1.0), (0, 0.0), (0, 0.0), (0, 0.0), (1, 0.5), (1, 0.5))]
    # group 0: mean 0.25, sample std 0.5 -> (0.75, -0.25, -0.25, -0.25) / 0.5; group 1 ties at 0
    torch.testing.assert_close(grpo_advantages(trajs),
                               torch.tensor([1.5, -0.5, -0.5, -0.5, 0.0, 0.0]), atol=1e-5, rtol=0)
    torch.testing.assert_close(grpo_advantages(trajs, normalize_std=False),
                               torch.tensor([0.75, -0.25, -0.25, -0.25, 0.0, 0.0]))
    config = apply(Config(), parse_overrides(["method.advantage_std=false"]))
    assert config.method.advantage_std is False
