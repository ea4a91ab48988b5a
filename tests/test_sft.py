"""The SFT warm start's loss: one-domain batches share their system prompt exactly."""

import pytest
import torch

from lopd.chat import ChatRenderer
from lopd.envs import load_suite
from lopd.models import LoraSpec, add_adapter, load_model
from lopd.reference import reference_trajectory
from lopd.sft import sft_loss, shared_prefix_lens


@pytest.fixture(scope="module")
def trajectories(smol_tokenizer):
    renderer = ChatRenderer(smol_tokenizer)
    tasks = [t for t in load_suite("toolworld-train", n=60) if t.reference]
    return [reference_trajectory(t, renderer) for t in tasks]


def test_rows_of_a_domain_share_its_system_prompt(trajectories):
    banking = [t for t in trajectories if t.task.domain == "banking"][:3]
    other = next(t for t in trajectories if t.task.domain != "banking")
    lengths = shared_prefix_lens([*banking, other])
    assert len(set(lengths[:3])) == 1 and 100 < lengths[0] < min(t.prompt_len for t in banking)
    assert all(t.input_ids[: lengths[0]] == banking[0].input_ids[: lengths[0]] for t in banking)
    assert lengths[3] == other.prompt_len  # alone in its domain: nothing to share


def test_shared_system_prompt_gives_the_same_loss_and_gradients(trajectories):
    model, tokenizer = load_model("tiny-random")  # its own copy: the adapter changes it
    student = add_adapter(model, "sft-test", LoraSpec(r=4, alpha=8))
    with torch.no_grad():  # LoRA B starts at zero: make the adapter matter
        for name, param in student.named_parameters():
            if "sft-test" in name and "lora_B" in name:
                param.normal_(0, 0.02)
    rows = [t for t in trajectories if t.task.domain == "inventory"][:3]
    rows.append(next(t for t in trajectories if t.task.domain == "travel"))
    params = [p for n, p in student.named_parameters() if "sft-test" in n]
    results = []
    for share in (False, True):
        for p in params:
            p.requires_grad_(True)
            p.grad = None
        loss = sft_loss(student, rows, tokenizer.pad_token_id, share_prefix=share)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in params]))
    (plain, plain_grads), (shared, shared_grads) = results
    assert torch.allclose(plain, shared, rtol=1e-5, atol=1e-6)
    for a, b in zip(plain_grads, shared_grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
