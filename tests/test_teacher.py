"""Teacher/student forwards with spliced context (lopd.teacher) on the tiny random model."""

import copy

import pytest
import torch

from lopd.batch import TokenBatch
from lopd.composer import Composer, ComposerConfig
from lopd.models import LoraSpec, add_adapter, freeze, load_model
from lopd.teacher import (
    insert_text_context,
    packed_targets,
    plan_splice,
    realign,
    select_positions,
    student_logits,
    supervised_targets,
    teacher_logits,
)

ATOL = 2e-5


@pytest.fixture(scope="module")
def peft_model():
    """A fresh tiny model (not the shared fixture: PEFT edits it in place) + student adapter
    whose B matrices are non-zero, so "adapters disabled" is observable."""
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-random")
    model = add_adapter(model, "student", LoraSpec(r=4))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B.student" in name:
                param.normal_(0, 0.05)
    return model, tokenizer


def make_batch(rows, prompt_lens, left_pad=False, pad_id=2):
    """TokenBatch from lists of ids; the last half of every row is marked as action."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    action = torch.zeros((len(rows), width), dtype=torch.bool)
    for b, row in enumerate(rows):
        cols = slice(width - len(row), width) if left_pad else slice(0, len(row))
        ids[b, cols] = torch.tensor(row)
        attention[b, cols] = 1
        mask = torch.zeros(len(row), dtype=torch.bool)
        mask[prompt_lens[b]:] = True
        action[b, cols] = mask
    return TokenBatch(ids, attention, action, torch.tensor(prompt_lens))


def random_rows(lengths, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(10, 5000, (n,), generator=gen).tolist() for n in lengths]


def real_rows(logits, batch):
    """Per-row logits at the real positions only (drops padding wherever it is)."""
    return [logits[b][batch.attention_mask[b].bool()] for b in range(logits.shape[0])]


def test_no_context_teacher_is_base_model_and_student_is_adapter(peft_model):
    model, _ = peft_model
    batch = make_batch(random_rows([9, 6]), [3, 2])
    with torch.no_grad():
        student_ref = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        with model.disable_adapter():
            base_ref = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        teacher = teacher_logits(model, batch)
        student = student_logits(model, batch)
    assert (student_ref - base_ref).abs().max() > 1e-3  # the adapter matters
    for got, ref in ((teacher, base_ref), (student, student_ref)):
        for g, r in zip(real_rows(got, batch), real_rows(ref, batch)):
            torch.testing.assert_close(g, r, atol=ATOL, rtol=0)


def test_teacher_model_argument_runs_the_frozen_copy(peft_model):
    model, _ = peft_model
    with model.disable_adapter():
        frozen = freeze(copy.deepcopy(model.get_base_model()))
    batch = make_batch(random_rows([7]), [3])
    with torch.no_grad():
        ref = frozen(input_ids=batch.input_ids).logits
        got = teacher_logits(model, batch, teacher_model=frozen)
    torch.testing.assert_close(got, ref, atol=ATOL, rtol=0)


def test_supervised_positions_match_full_logits(peft_model):
    model, _ = peft_model
    batch = make_batch(random_rows([9, 6]), [3, 2])
    context = torch.randn(2, 3, model.config.hidden_size) * 0.1
    mask = torch.tensor([[True, True, True], [True, False, False]])
    with torch.no_grad():
        full = teacher_logits(model, batch, context, mask)  # (B, T, V)
        picked = teacher_logits(model, batch, context, mask, positions="supervised")  # (N, V)
        hidden = teacher_logits(model, batch, context, mask, "supervised", return_hidden=True)
    selected = select_positions(batch, "supervised")
    assert picked.shape == (int(batch.target_mask.sum()), full.shape[-1])
    assert hidden.shape == (picked.shape[0], model.config.hidden_size)
    torch.testing.assert_close(picked, full[selected], atol=ATOL, rtol=0)
    torch.testing.assert_close(supervised_targets(batch), batch.targets[batch.target_mask])


def test_packed_positions_feed_per_row_losses(peft_model):
    """positions="packed" (B, S, V) + its mask give the same per-row loss as (B, T, V)."""
    model, _ = peft_model
    batch = make_batch(random_rows([12, 6, 9], seed=4), [9, 2, 5])
    context = torch.randn(3, 2, model.config.hidden_size) * 0.2
    with torch.no_grad():
        full_t = teacher_logits(model, batch, context)[:, :-1]  # target-aligned (B, T-1, V)
        full_s = student_logits(model, batch)[:, :-1]
        packed_t = teacher_logits(model, batch, context, positions="packed")  # (B, S, V)
        packed_s = student_logits(model, batch, positions="packed")
    targets, mask = packed_targets(batch)
    counts = batch.target_mask.sum(1)
    assert packed_t.shape == (3, int(counts.max()), full_t.shape[-1])
    assert mask.sum(1).tolist() == counts.tolist()
    torch.testing.assert_close(packed_t[mask], full_t[batch.target_mask], atol=ATOL, rtol=0)
    torch.testing.assert_close(targets[mask], batch.targets[batch.target_mask])
    losses = pytest.importorskip("lopd.losses")
    full = losses.topm_tail_reverse_kl(full_s, full_t, batch.target_mask, top_m=5)
    packed = losses.topm_tail_reverse_kl(packed_s, packed_t, mask, top_m=5)
    torch.testing.assert_close(packed, full, atol=1e-5, rtol=0)


def test_latent_context_is_causal(peft_model):
    """Context inserted after the prompt (p tokens) changes only logits[:, i] for i >= p - 1:
    earlier positions cannot see it; position p - 1 predicts token p from behind the context."""
    model, _ = peft_model
    p = 4
    batch = make_batch(random_rows([10]), [p])
    d = model.config.hidden_size
    first, second = torch.randn(1, 2, d) * 0.2, torch.randn(1, 2, d) * 0.2
    second[:, 0] = first[:, 0]  # differ only in the second latent
    with torch.no_grad():
        none = teacher_logits(model, batch)
        one = teacher_logits(model, batch, first)
        two = teacher_logits(model, batch, second)
    torch.testing.assert_close(one[:, : p - 1], none[:, : p - 1], atol=ATOL, rtol=0)
    torch.testing.assert_close(two[:, : p - 1], one[:, : p - 1], atol=ATOL, rtol=0)
    assert ((one - none).abs().amax(-1)[0, p - 1 :] > 1e-4).all()
    assert ((two - one).abs().amax(-1)[0, p - 1 :] > 1e-4).all()


@pytest.mark.parametrize("left_pad", [False, True])
def test_padding_and_prompt_lengths_match_rows_run_alone(peft_model, left_pad):
    model, _ = peft_model
    lengths, prompts = [11, 6, 8], [4, 2, 5]
    rows = random_rows(lengths, seed=1)
    d = model.config.hidden_size
    context = torch.randn(3, 3, d) * 0.2
    mask = torch.tensor([[True, True, True], [True, False, True], [False, False, False]])
    batch = make_batch(rows, prompts, left_pad=left_pad)
    with torch.no_grad():
        together = real_rows(teacher_logits(model, batch, context, mask), batch)
        for b, row in enumerate(rows):
            alone_batch = make_batch([row], [prompts[b]])
            keep = mask[b]
            alone = teacher_logits(model, alone_batch, context[b : b + 1, keep])
            torch.testing.assert_close(together[b], alone[0], atol=ATOL, rtol=0)


def test_text_and_latent_paths_agree(peft_model):
    model, _ = peft_model
    rows, prompts = random_rows([9, 7], seed=2), [3, 5]
    batch = make_batch(rows, prompts)
    text = [[101, 102, 103, 104], [105, 106]]
    ids = torch.tensor([[101, 102, 103, 104], [105, 106, 2, 2]])
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    with torch.no_grad():
        latent = model.get_input_embeddings()(ids)
        from_latent = teacher_logits(model, batch, latent, mask)
        from_ids = teacher_logits(model, batch, ids, mask)
        spliced, index = insert_text_context(batch, text, pad_id=2)
        with model.disable_adapter():
            plain = model(input_ids=spliced.input_ids, attention_mask=spliced.attention_mask).logits
    torch.testing.assert_close(from_ids, from_latent, atol=ATOL, rtol=0)
    for got, ref in zip(real_rows(realign(plain, index), batch), real_rows(from_ids, batch)):
        torch.testing.assert_close(got, ref, atol=ATOL, rtol=0)
    # The spliced batch: context right after the prompt, never supervised.
    assert spliced.input_ids[0].tolist()[:11] == rows[0][:3] + text[0] + rows[0][3:7]
    assert spliced.prompt_lens.tolist() == [7, 7]
    assert not spliced.action_mask[0, 3:7].any() and spliced.action_mask[0, 7:13].all()
    assert int(spliced.action_mask.sum()) == int(batch.action_mask.sum())


def test_splice_plan_positions_are_contiguous():
    attention = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])
    plan = plan_splice(attention, torch.tensor([1, 2]), torch.tensor([[True, True], [True, False]]))
    # row 0: real tokens at 2,3,4, prompt 1 -> [t2, c, c, t3, t4, pad, pad]
    assert plan.dest[0].tolist() == [5, 6, 0, 3, 4]
    assert plan.ctx_dest.tolist() == [[1, 2], [2, -1]]
    assert plan.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0, 0]]
    assert plan.pred_index[0, 2].item() == 2  # token 3 is predicted from the last latent
    assert plan.pred_index[1, 1].item() == 2  # row 1: token 2 from its only latent


def test_backbone_gets_no_gradient_composer_does(peft_model):
    model, tokenizer = peft_model
    composer = Composer(model, tokenizer, ComposerConfig(num_queries=4, n_layers=1,
                                                         lora=LoraSpec(r=4)))
    with torch.no_grad():  # non-zero B so psi's A matrices get gradient too
        for param in composer.lora_parameters().values():
            param.normal_(0, 0.02)
    batch = make_batch(random_rows([9, 7], seed=3), [3, 4])
    context, mask = composer.compose(["task a", "task b"], [["exp one", "exp two"], ["exp"]])
    logits = teacher_logits(model, batch, context, mask, positions="supervised")
    loss = torch.nn.functional.cross_entropy(logits, supervised_targets(batch))
    model.zero_grad(set_to_none=True)
    loss.backward()
    psi = set(composer.lora_parameters().values())
    for name, param in model.named_parameters():
        if param in psi:
            assert param.grad is not None and param.grad.abs().sum() > 0, name
        else:
            assert param.grad is None, name  # base weights and the student's adapter
    for name, param in composer.compressor.named_parameters():
        assert param.grad is not None, name
    model.delete_adapter("composer")


def test_full_finetune_wiring_composer_on_the_frozen_copy():
    """Fully fine-tuned student: the composer lives on the frozen teacher copy, and the teacher
    is that copy's PeftModel (composer adapter disabled in the teacher pass)."""
    torch.manual_seed(0)
    student, tokenizer = load_model("tiny-random")
    frozen = freeze(copy.deepcopy(student))
    batch = make_batch(random_rows([8, 6], seed=5), [3, 2])
    with torch.no_grad():
        reference = frozen(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    composer = Composer(frozen, tokenizer, ComposerConfig(num_queries=2, n_layers=1,
                                                          lora=LoraSpec(r=4)))
    teacher = composer.model  # PeftModel around the frozen copy
    with torch.no_grad():
        for param in composer.lora_parameters().values():
            param.normal_(0, 0.05)
        plain = teacher_logits(student, batch, teacher_model=teacher)
    for got, ref in zip(real_rows(plain, batch), real_rows(reference, batch)):
        torch.testing.assert_close(got, ref, atol=ATOL, rtol=0)
    context, mask = composer.compose(["t1", "t2"], [["e1"], ["e2", "e3"]])
    t_logits = teacher_logits(student, batch, context, mask, "supervised", teacher_model=teacher)
    s_logits = student_logits(student, batch, "supervised")
    (t_logits.logsumexp(-1).sum() + s_logits.logsumexp(-1).sum()).backward()
    assert all(p.grad is not None for p in composer.trainable_parameters())
    assert all(p.grad is None for n, p in teacher.named_parameters() if "lora_" not in n)
    assert student.get_input_embeddings().weight.grad is not None


def grouped_batch(seed=0):
    """Two tasks x 3 rollouts: rows of a task share the prompt, trajectories differ in
    length; one row is left-padded to check compaction."""
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(10, 5000, (n,), generator=gen).tolist() for n in (7, 5)]
    rows, lens = [], []
    for task, prompt in enumerate(prompts):
        for rollout in range(3):
            tail = torch.randint(10, 5000, (3 + 2 * rollout + task,), generator=gen).tolist()
            rows.append(prompt + tail)
            lens.append(len(prompt))
    return make_batch(rows, lens), torch.tensor([0, 0, 0, 1, 1, 1])


@pytest.mark.parametrize("kind", ["none", "latent", "text"])
def test_shared_prefix_forward_equals_plain_forward(peft_model, kind, monkeypatch):
    import lopd.teacher

    calls = []
    real = lopd.teacher.shared_prefix_hidden
    monkeypatch.setattr(lopd.teacher, "shared_prefix_hidden",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    model, _ = peft_model
    batch, task = grouped_batch()
    context = mask = None
    if kind == "latent":
        leaf = torch.randn(2, 4, model.config.hidden_size, requires_grad=True)
        context = leaf.index_select(0, task)
        mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool).index_select(0, task)
    elif kind == "text":
        context = torch.tensor([[11, 12, 13], [14, 15, 0]]).index_select(0, task)
        mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool).index_select(0, task)
    outputs, grads = [], []
    for share in (True, False):
        if kind == "latent":
            context = leaf.index_select(0, task)  # a fresh graph for each pass
        logits = teacher_logits(model, batch, context, mask, positions="supervised",
                                share_prefix=share)
        outputs.append(logits.detach())
        if kind == "latent":
            (grad,) = torch.autograd.grad(logits.logsumexp(-1).sum(), leaf)
            grads.append(grad)
    assert calls == [1]  # the shared path ran once (share_prefix=True) and was not bypassed
    torch.testing.assert_close(outputs[0], outputs[1], atol=ATOL, rtol=1e-4)
    if grads:
        assert grads[0].abs().sum() > 0
        torch.testing.assert_close(grads[0], grads[1], atol=ATOL, rtol=1e-4)


def test_shared_prefix_student_gradients_match(peft_model):
    """The student's prompt runs once per task with grad; LoRA gradients add up exactly."""
    model, _ = peft_model
    batch, _ = grouped_batch(seed=1)
    lora = [p for n, p in model.named_parameters() if "lora_" in n and "student" in n]
    assert lora and all(p.requires_grad for p in lora)
    grads = []
    for share in (True, False):
        logits = student_logits(model, batch, positions="supervised", share_prefix=share)
        grads.append(torch.autograd.grad(logits.logsumexp(-1).sum(), lora))
    for shared, plain in zip(*grads):
        torch.testing.assert_close(shared, plain, atol=1e-4, rtol=1e-4)


def test_prefix_groups_finds_repeated_prefixes():
    from lopd.prefix import prefix_groups

    inputs = torch.tensor([[1., 2, 3], [1, 2, 4], [1, 9, 3], [1, 2, 3]])[..., None]
    reps, inverse = prefix_groups(inputs, torch.tensor([2, 2, 2, 3]))
    assert reps == [0, 2, 3] and inverse.tolist() == [0, 0, 1, 2]


def test_collate_through_last_action_drops_only_the_trailing_observation():
    from lopd.batch import collate, kept_length
    from lopd.types import Task, Trajectory

    task = Task(id="t", split="train", domain="d", prompt="p")
    cut = Trajectory(task=task, input_ids=[5, 6, 7, 8, 9, 10, 11], action_mask=[0, 0, 1, 1, 0, 0, 0],
                     turn_spans=[(2, 4)], prompt_len=2, messages=[])
    done = Trajectory(task=task, input_ids=[5, 6, 7], action_mask=[0, 1, 1], turn_spans=[(1, 3)],
                      prompt_len=1, messages=[])
    silent = Trajectory(task=task, input_ids=[5, 6], action_mask=[0, 0], turn_spans=[],
                        prompt_len=2, messages=[])
    assert [kept_length(t) for t in (cut, done, silent)] == [4, 3, 2]
    full = collate([cut, done, silent], pad_id=0)
    trimmed = collate([cut, done, silent], pad_id=0, through_last_action=True)
    assert full.input_ids.shape == (3, 7) and trimmed.input_ids.shape == (3, 4)
    assert trimmed.input_ids.tolist() == [[5, 6, 7, 8], [5, 6, 7, 0], [5, 6, 0, 0]]
    assert trimmed.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]]
    # the supervised targets are the same tokens in the same order
    assert full.targets[full.target_mask].tolist() == trimmed.targets[trimmed.target_mask].tolist()
