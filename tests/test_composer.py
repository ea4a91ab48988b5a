"""Composer (eq. 5-6): rendering, shapes, masks, adapter handling, gradients, save/load."""

import pytest
import torch

from lopd.composer import (
    Composer,
    ComposerConfig,
    expand_for_groups,
    render_pair,
    use_adapter,
)
from lopd.models import LoraSpec, add_adapter, load_model

K = 4
TASKS = ["Find the code of box 3.", "Book a flight to Oslo."]
EXPERIENCES = [
    ["Box 3 was opened with code maple.", "Unrelated: the printer is on floor 2."],
    ["Booked flight LH12 to Oslo with book_flight."],
]


def small_config(**overrides):
    return ComposerConfig(num_queries=K, n_layers=2, mlp_ratio=2.0, lora=LoraSpec(r=4),
                          **overrides)


@pytest.fixture(scope="module")
def setup():
    """Fresh tiny model with a student adapter (PEFT edits models in place) + a composer."""
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-random")
    model = add_adapter(model, "student", LoraSpec(r=4))
    composer = Composer(model, tokenizer, small_config())
    with torch.no_grad():  # non-zero B matrices so both adapters change the backbone
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    return model, tokenizer, composer


def test_render_pair_cuts_the_experience_first(smol_tokenizer):
    ids = render_pair(smol_tokenizer, "Find the code.", "word " * 400, max_tokens=40)
    text = smol_tokenizer.decode(ids)
    assert len(ids) == 40
    assert text.startswith("<|im_start|>user\nTask: Find the code.\nExperience: word")
    assert text.endswith("<|im_end|>\n")
    short = render_pair(smol_tokenizer, "t", "e", max_tokens=512)
    assert smol_tokenizer.decode(short) == "<|im_start|>user\nTask: t\nExperience: e<|im_end|>\n"


def test_compose_shapes_masks_and_norms(setup):
    model, _, composer = setup
    context, mask = composer.compose(TASKS, EXPERIENCES)
    d = model.config.hidden_size
    assert context.shape == (2, 2 * K, d) and mask.shape == (2, 2 * K)
    assert mask[0].all() and mask[1, :K].all() and not mask[1, K:].any()
    norms = context.norm(dim=-1)
    torch.testing.assert_close(norms[mask], torch.full_like(norms[mask], composer.target_norm))
    assert (context[1, K:] == 0).all()
    embedding = model.get_input_embeddings().weight
    assert composer.target_norm == pytest.approx(embedding.norm(dim=-1).mean().item(), rel=1e-5)
    # a task without experiences gets an empty (fully masked) context
    empty, empty_mask = composer.compose(["t"], [[]])
    assert empty.shape == (1, 0, d) and empty_mask.shape == (1, 0)


def test_batched_compose_equals_one_task_at_a_time(setup):
    _, _, composer = setup
    with torch.no_grad():
        together, _ = composer.compose(TASKS, EXPERIENCES)
        first, _ = composer.compose(TASKS[:1], EXPERIENCES[:1])
        second, _ = composer.compose(TASKS[1:], EXPERIENCES[1:])
    torch.testing.assert_close(together[0], first[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(together[1, :K], second[0], atol=1e-5, rtol=0)


def test_encoder_uses_its_own_adapter_and_restores_state(setup):
    model, _, composer = setup
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    assert model.active_adapter == "student"
    with torch.no_grad():
        before, _ = composer.compose(TASKS, EXPERIENCES)
        student_b = [p for n, p in model.named_parameters() if "lora_B.student" in n]
        saved = [p.clone() for p in student_b]
        for p in student_b:
            p.add_(1.0)
        unchanged, _ = composer.compose(TASKS, EXPERIENCES)
        for p, s in zip(student_b, saved):
            p.copy_(s)
        psi = next(p for n, p in composer.lora_parameters().items() if "lora_B" in n)
        psi.add_(1.0)
        changed, _ = composer.compose(TASKS, EXPERIENCES)
        psi.sub_(1.0)
    torch.testing.assert_close(unchanged, before)
    assert (changed - before).abs().max() > 1e-4
    assert model.active_adapter == "student"
    assert flags == {n: p.requires_grad for n, p in model.named_parameters()}
    with use_adapter(model, "composer"):
        assert model.active_adapter == "composer"
    assert model.active_adapter == "student"


def test_gradients_flow_to_phi_and_freezing_stops_them(setup):
    model, _, composer = setup
    composer.zero_grad(set_to_none=True)
    model.zero_grad(set_to_none=True)
    context, mask = composer.compose(TASKS, EXPERIENCES)
    (context[mask] ** 3).sum().backward()
    for name, param in composer.lora_parameters().items():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    assert all(p.grad is not None for p in composer.compressor.parameters())
    assert all(p.grad is None for n, p in model.named_parameters() if "composer" not in n)
    composer.zero_grad(set_to_none=True)
    for param in composer.lora_parameters().values():
        param.grad = None
    composer.requires_grad_(False)
    try:
        context, _ = composer.compose(TASKS, EXPERIENCES)
        assert not context.requires_grad
    finally:
        composer.requires_grad_(True)


def test_state_dict_save_load_and_adapter_rename(setup, tmp_path):
    model, tokenizer, composer = setup
    state = composer.state_dict()
    assert any(k.startswith("lora.") for k in state) and "compressor.queries" in state
    assert not any(".composer." in k for k in state)  # portable across adapter names
    n_params = sum(p.numel() for p in composer.trainable_parameters())
    assert n_params == sum(v.numel() for k, v in state.items() if k != "compressor.target_norm")
    composer.save(tmp_path / "phi0")
    assert (tmp_path / "phi0" / "composer.json").is_file()
    copy = Composer.from_pretrained(tmp_path / "phi0", model, tokenizer, adapter_name="anchor")
    with torch.no_grad():
        ours, _ = composer.compose(TASKS, EXPERIENCES)
        theirs, _ = copy.compose(TASKS, EXPERIENCES)
        for param in copy.compressor.parameters():
            param.add_(0.1)
        copy.load(tmp_path / "phi0")
        again, _ = copy.compose(TASKS, EXPERIENCES)
    torch.testing.assert_close(theirs, ours)
    torch.testing.assert_close(again, ours)
    model.delete_adapter("anchor")
    twin = composer.frozen_copy("twin")
    assert not any(p.requires_grad for p in twin.trainable_parameters())
    assert all(p.requires_grad for p in composer.trainable_parameters())
    with torch.no_grad():
        torch.testing.assert_close(twin.compose(TASKS, EXPERIENCES)[0], ours)
    model.delete_adapter("twin")


def test_attention_weights_cover_real_tokens_only(setup):
    _, _, composer = setup
    with torch.no_grad():
        out = composer.compose_detailed(TASKS, EXPERIENCES, return_attention=True)
    lengths = [len(ids) for ids in out.pair_ids]
    assert out.attention.shape == (3, K, max(lengths))
    assert out.pair_task.tolist() == [0, 0, 1] and out.pair_slot.tolist() == [0, 1, 0]
    for p, n in enumerate(lengths):
        torch.testing.assert_close(out.attention[p, :, :n].sum(-1), torch.ones(K))
        assert (out.attention[p, :, n:] == 0).all()


def test_plain_backbone_encoder_without_lora():
    model, tokenizer = load_model("tiny-random")
    composer = Composer(model, tokenizer, small_config(encoder_lora=False))
    assert composer.model is model and composer.lora_parameters() == {}
    assert len(composer.trainable_parameters()) == len(list(composer.compressor.parameters()))
    context, mask = composer.compose(TASKS, EXPERIENCES)
    context[mask].sum().backward()
    assert all(p.grad is None for p in model.parameters())
    assert composer.compressor.queries.grad is not None


def test_expand_for_groups():
    context = torch.arange(2 * 3 * 2, dtype=torch.float).reshape(2, 3, 2)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    expanded, expanded_mask = expand_for_groups(context, mask, [0, 0, 1, 1, 1])
    assert expanded.shape == (5, 3, 2)
    torch.testing.assert_close(expanded[4], context[1])
    assert expanded_mask[:, 1].tolist() == [True, True, False, False, False]


def test_latent_diversity_hand_values():
    from lopd.composer import latent_diversity

    x, y = [1.0, 0.0], [0.0, 1.0]
    repeated = torch.tensor([[x, x], [y, y]])  # one vector per pair, pairs apart
    assert latent_diversity(repeated) == pytest.approx({"within": 1.0, "across": 0.0})
    blind = torch.tensor([[x, y], [x, y]])  # latents apart, the same for every input
    assert latent_diversity(blind) == pytest.approx({"within": 0.0, "across": 1.0})
    one = latent_diversity(torch.tensor([[x, y]]))
    assert one["within"] == pytest.approx(0.0) and one["across"] != one["across"]  # NaN


def test_step_metrics_name_a_collapsed_latent_context():
    from lopd.contexts import StepContext, latent_context_diversity

    x, y = [1.0, 0.0], [0.0, 1.0]
    # two tasks, J = 2 slots of K = 2 latents; task 1's second slot is empty
    latent = torch.tensor([[x, x, x, x], [x, x, y, y]])
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    context = StepContext(active=torch.ones(2, dtype=torch.bool), task_latent=latent,
                          task_mask=mask)
    assert latent_context_diversity(context, 2) == pytest.approx(
        {"latent_cos_within": 1.0, "latent_cos_across": 1.0})  # the empty slot is not counted
    assert latent_context_diversity(StepContext(active=torch.ones(1, dtype=torch.bool)), 2) == {}
