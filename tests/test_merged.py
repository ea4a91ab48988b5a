"""``lopd.merged.MergedStudent``: the LoRA student as one plain model, for decoding."""

import copy

import pytest
import torch

from lopd.generation import HFBackend, SamplingParams
from lopd.merged import MergedStudent
from lopd.models import LoraSpec, add_adapter


@pytest.fixture()
def student(tiny):
    model, tokenizer = tiny
    peft = add_adapter(copy.deepcopy(model), "student", LoraSpec(r=4, alpha=8))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in peft.named_parameters():
            if "lora_B" in name:  # B = 0 at init: give the adapter an effect
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    peft.eval()
    return peft, tokenizer


def _prompts(tokenizer):
    texts = ["hello there", "a longer prompt about banking and accounts", "x"]
    return [tokenizer(t)["input_ids"] for t in texts]


def test_merged_logits_equal_the_peft_student_and_differ_from_the_base(student):
    peft, tokenizer = student
    merged = MergedStudent(peft, "student").sync()
    ids = torch.tensor([tokenizer("the same function with one product per linear")["input_ids"]])
    with torch.no_grad():
        want = peft(input_ids=ids).logits
        got = merged(input_ids=ids).logits
        with peft.disable_adapter():
            base = peft(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert (want - base).abs().max() > 1e-3  # the adapter changes the function


def test_merged_greedy_tokens_equal_the_peft_student(student):
    peft, tokenizer = student
    merged = MergedStudent(peft, "student")
    params = SamplingParams(max_new_tokens=12, temperature=0.0)
    stops = {tokenizer.eos_token_id}
    want = HFBackend(peft, stops, tokenizer.pad_token_id).generate(_prompts(tokenizer), params)
    got = HFBackend(merged.sync(), stops, tokenizer.pad_token_id).generate(_prompts(tokenizer), params)
    assert got == want


def test_sync_follows_an_optimizer_step_and_leaves_the_base_untouched(student):
    peft, tokenizer = student
    base_before = {n: p.detach().clone() for n, p in peft.named_parameters() if "lora_" not in n}
    merged = MergedStudent(peft, "student")
    ids = torch.tensor([tokenizer("after a step")["input_ids"]])
    trainable = [p for n, p in peft.named_parameters() if "lora_" in n]
    for p in trainable:
        p.requires_grad_(True)
    opt = torch.optim.SGD(trainable, lr=0.5)
    peft(input_ids=ids).logits.square().mean().backward()
    opt.step()
    with torch.no_grad():
        stale = merged.model(input_ids=ids).logits
        fresh = merged.sync()(input_ids=ids).logits
        want = peft(input_ids=ids).logits
    torch.testing.assert_close(fresh, want, rtol=1e-4, atol=1e-5)
    assert (stale - want).abs().max() > 1e-4  # without sync the merged weights are the old ones
    for name, parameter in peft.named_parameters():
        if "lora_" not in name:
            assert torch.equal(parameter, base_before[name]), name


def test_shares_untargeted_tensors_and_owns_only_the_merged_weights(student):
    peft, _ = student
    merged = MergedStudent(peft, "student").model
    base = {p.data_ptr() for p in peft.parameters()}
    owned = [n for n, p in merged.named_parameters() if p.data_ptr() not in base]
    assert owned and all(n.endswith("_proj.weight") for n in owned)
    assert not any("lora_" in n for n, _ in merged.named_parameters())
    assert MergedStudent.supported(peft, "student") and not MergedStudent.supported(peft, "other")
