"""Composer cold start (paper §3.2) on synthetic trajectories whose answer is in the experience."""

import pytest
import torch

from lopd.batch import collate
from lopd.chat import ChatRenderer
from lopd.coldstart import ColdStartExample, cold_start, evaluate_nll
from lopd.composer import Composer, ComposerConfig
from lopd.models import LoraSpec, add_adapter, load_model
from lopd.types import Task, Trajectory

WORDS = ["apple", "river", "stone", "cloud", "tiger", "maple", "ember", "frost"]


def synthetic_examples(tokenizer, n: int) -> list[ColdStartExample]:
    """Successful one-turn trajectories "The code is W." whose OTHER retrieved experiences say
    which W opened the box (plus a distractor)."""
    renderer = ChatRenderer(tokenizer)
    examples = []
    for i in range(n):
        word = WORDS[i % len(WORDS)]
        question = f"What is the code of box {i}?"
        messages = [{"role": "user", "content": question},
                    {"role": "assistant", "content": f"The code is {word}."}]
        prompt, _ = renderer.render(messages[:1], add_generation_prompt=True)
        ids, mask = renderer.render(messages)
        task = Task(id=str(i), split="train", domain="codes", prompt=question)
        trajectory = Trajectory(task, ids, mask, [], len(prompt), messages, 1.0, True)
        experiences = [f"Box {i} was opened with the code {word}.", "The printer is on floor 2."]
        examples.append(ColdStartExample(trajectory, question, experiences))
    return examples


def build(name: str, seed: int = 0, **config):
    torch.manual_seed(seed)
    model, tokenizer = load_model(name)
    model = add_adapter(model, "student", LoraSpec(r=4))
    composer = Composer(model, tokenizer, ComposerConfig(lora=LoraSpec(r=4), **config))
    return model, tokenizer, composer


def test_cold_start_lowers_teacher_nll_with_context(tmp_path):
    model, tokenizer, composer = build("tiny-random", num_queries=4, n_layers=1)
    student = {n: p.clone() for n, p in model.named_parameters() if "composer" not in n}
    examples = synthetic_examples(tokenizer, 12)
    result = cold_start(composer, model, tokenizer, examples, steps=30, lr=3e-3, batch_size=6,
                        micro_batch=6, save_dir=tmp_path / "phi0")
    assert len(result.losses) == 30
    # Untrained, the context is noise: no better than no context at all.
    assert result.nll_context_before > result.nll_no_context - 0.05
    # Trained, it must help the frozen teacher by a clear margin (the tiny random model's
    # logits are nearly flat, so ~0.1 nats is already most of what it can move).
    assert result.nll_context_after < result.nll_no_context - 0.1, result.as_dict()
    assert sum(result.losses[-5:]) / 5 < sum(result.losses[:5]) / 5 - 0.1
    # Only phi moved: the backbone and the student adapter are untouched.
    for name, param in model.named_parameters():
        if name in student:
            torch.testing.assert_close(param, student[name], rtol=0, atol=0)
    # phi_0 was saved and reproduces the number.
    _, _, fresh = build("tiny-random", num_queries=4, n_layers=1)
    fresh.load(tmp_path / "phi0")
    reloaded = evaluate_nll(fresh, fresh.model, examples, with_context=True)
    assert reloaded == pytest.approx(result.nll_context_after, abs=1e-4)


def test_micro_batches_accumulate_the_whole_batch_gradient():
    """A step over 5 examples in forwards of 1 or 2 equals one forward of all 5: loss and grads."""
    from lopd.coldstart import _accumulate_step

    model, tokenizer, composer = build("tiny-random", num_queries=4, n_layers=1)
    examples = synthetic_examples(tokenizer, 5)
    seen = []
    for micro_batch in (5, 2, 1):
        for param in composer.trainable_parameters():
            param.grad = None
        loss = _accumulate_step(composer, model, examples, micro_batch, None,
                                tokenizer.pad_token_id, "fp32")
        seen.append((loss, [p.grad.clone() for p in composer.trainable_parameters()]))
    whole_loss, whole_grads = seen[0]
    assert whole_loss > 0 and any(g.abs().sum() > 0 for g in whole_grads)
    for loss, grads in seen[1:]:
        assert loss == pytest.approx(whole_loss, rel=1e-5)
        for a, b in zip(grads, whole_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_token_batch_rows_and_trajectories_give_the_same_nll():
    model, tokenizer, composer = build("tiny-random", num_queries=4, n_layers=1)
    examples = synthetic_examples(tokenizer, 3)
    rows = []
    for example in examples:
        row = collate([example.trajectory], tokenizer.pad_token_id)
        rows.append(ColdStartExample(row, example.task_text, example.experiences))
    for with_context in (False, True):
        a = evaluate_nll(composer, model, examples, with_context)
        b = evaluate_nll(composer, model, rows, with_context, batch_size=2)
        assert a == pytest.approx(b, abs=1e-5)


@pytest.mark.slow
def test_cold_start_on_smollm2_helps_the_real_teacher():
    """Real 135M model: random latents hurt the teacher; a short cold start makes the latent
    context better than no context. (Whether the composer carries task-specific information,
    i.e. matching experiences beat shuffled ones, takes far more steps than a test can afford.)
    """
    model, tokenizer, composer = build("smollm2-135m", num_queries=4, n_layers=1)
    examples = synthetic_examples(tokenizer, 8)
    # micro_batch=4: the 4 examples of a step in one forward (the same gradient as 4 forwards
    # of one, test_micro_batches_accumulate_the_whole_batch_gradient; half the time on a CPU)
    result = cold_start(composer, model, tokenizer, examples, steps=10, lr=3e-3, batch_size=4,
                        micro_batch=4)
    assert result.nll_context_after < result.nll_context_before - 0.5, result.as_dict()
    assert result.nll_context_after < result.nll_no_context - 0.2, result.as_dict()


def test_contrast_hinge_hand_values():
    from lopd.coldstart import contrast_hinge

    own = torch.tensor([1.0, 1.0, 1.0])
    other = torch.tensor([1.0, 1.03, 2.0])  # no gap, a gap below the margin, a wide gap
    torch.testing.assert_close(contrast_hinge(own, other, 0.05), torch.tensor([0.05, 0.02, 0.0]))


def test_shuffled_examples_hand_each_trajectory_another_experience_list():
    from lopd.coldstart import shuffled_examples

    _, tokenizer = load_model("tiny-random")
    examples = synthetic_examples(tokenizer, 3)
    shuffled = shuffled_examples(examples)
    for index, (example, other) in enumerate(zip(examples, shuffled, strict=True)):
        assert other.trajectory is example.trajectory and other.task_text == example.task_text
        assert other.experiences == examples[(index + 1) % 3].experiences
    same = [ColdStartExample(e.trajectory, e.task_text, ["one list"]) for e in examples]
    assert [s.experiences for s in shuffled_examples(same)] == [["one list"]] * 3


def test_contrast_term_is_the_hinge_on_own_and_shuffled_nll():
    """_accumulate_step with contrast = the plain loss + contrast * mean hinge, both from
    teacher_nll: checked against the two NLLs computed directly."""
    from lopd.coldstart import _accumulate_step, _row_means, shuffled_examples, teacher_nll

    model, tokenizer, composer = build("tiny-random", num_queries=4, n_layers=1)
    examples = synthetic_examples(tokenizer, 4)
    pad = tokenizer.pad_token_id
    with torch.no_grad():
        own, _ = _row_means(*teacher_nll(composer, model, examples, True, pad_id=pad), 4)
        other, _ = _row_means(*teacher_nll(composer, model, shuffled_examples(examples), True,
                                           pad_id=pad), 4)
    margin = float((other - own).abs().max()) + 0.1  # every row inside the hinge
    plain = _accumulate_step(composer, model, examples, 2, None, pad, "fp32")
    contrasted = _accumulate_step(composer, model, examples, 2, None, pad, "fp32",
                                  contrast=0.5, margin=margin)
    expected = float(own.mean()) + 0.5 * float((margin - (other - own)).mean())
    assert plain == pytest.approx(float(own.mean()), rel=1e-5)
    assert contrasted == pytest.approx(expected, rel=1e-5)

