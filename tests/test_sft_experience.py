"""Experience-conditioned warm-start rows (`lopd sft --experience-suite`): what they retrieve,
and that their loss is the NLL of the reference with the context message in the prompt."""

import json
import random

import pytest
import torch

from lopd.chat import ChatRenderer
from lopd.envs import load_suite
from lopd.models import LoraSpec, add_adapter, load_model
from lopd.runtime import experience_text_message
from lopd.sft_experience import (
    ExperienceRow,
    build_pool,
    draw_rows,
    experience_sft_loss,
    pick_experiences,
)


@pytest.fixture(scope="module")
def pool(smol_tokenizer):
    tasks = [t for t in load_suite("toolworld-rules-icl") if t.domain in ("banking", "travel")]
    return build_pool(tasks[:120], ChatRenderer(smol_tokenizer), chars=600)


def test_icl_organisations_are_used_by_no_other_rules_suite():
    icl = {t.metadata["org"] for t in load_suite("toolworld-rules-icl")}
    others = {t.metadata["org"] for suite in ("train", "test", "transfer")
              for t in load_suite(f"toolworld-rules-{suite}")}
    assert len(icl) == 12 and not icl & others


def test_same_rule_context_shows_the_tasks_own_rule_never_the_task(pool):
    rng = random.Random(0)
    task = next(t.task for t in pool.trajs if t.task.metadata["rules"])
    texts = pick_experiences(pool, task, "same-rule", 3, rng)
    own = {row[2]: row for row in pool.texts[task.metadata["org"]]}
    assert len(texts) == 3 and all(text in own for text in texts)
    assert all(own[text][0] != task.id for text in texts)
    assert all(own[text][1] & set(task.metadata["rules"]) for text in texts)
    from lopd.envs.toolworld.rules_orgs import ORGS

    assert all(ORGS[task.metadata["org"]].name in text for text in texts)  # the org is readable


def test_mixed_context_holds_one_own_success_and_the_rest_from_the_domain(pool):
    rng = random.Random(1)
    task = pool.by_domain["travel"][0].task
    texts = pick_experiences(pool, task, "mixed", 3, rng)
    org = task.metadata["org"]
    own = {row[2] for row in pool.texts[org]}
    others = {row[2] for key, rows in pool.texts.items() if key != org
              and pool.org_domain[key] == "travel" for row in rows}
    assert len(texts) == 3 and sum(t in own for t in texts) == 1
    assert sum(t in others for t in texts) == 2


def test_loss_is_the_nll_of_the_reference_with_the_context_in_the_prompt(pool, smol_tokenizer):
    model, tokenizer = load_model("tiny-random")
    student = add_adapter(model, "exp-test", LoraSpec(r=4, alpha=8))
    with torch.no_grad():
        for name, param in student.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)
    renderer = ChatRenderer(smol_tokenizer)
    rows = draw_rows(pool, renderer, 3, 2, random.Random(2))
    assert {row.traj.task.domain for row in rows} == {rows[0].traj.task.domain}
    loss = experience_sft_loss(student, rows, tokenizer.pad_token_id)
    naive = []
    for row in rows:  # the context message rendered in place, one plain forward
        traj = row.traj
        ids = traj.input_ids[: traj.prompt_len] + row.context_ids + traj.input_ids[traj.prompt_len:]
        mask = [0] * (traj.prompt_len + len(row.context_ids)) + traj.action_mask[traj.prompt_len:]
        with torch.no_grad():
            logits = student(input_ids=torch.tensor([ids])).logits[0]
        logp = torch.log_softmax(logits[:-1].float(), -1)
        target = torch.tensor(ids[1:])
        picked = logp.gather(1, target[:, None])[:, 0][torch.tensor(mask[1:]).bool()]
        naive.append(-picked.mean())
    assert torch.allclose(loss.detach(), torch.stack(naive).mean(), rtol=1e-4, atol=1e-5)
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0
               for n, p in student.named_parameters() if "exp-test" in n)


def test_context_message_is_the_text_ablations_message(pool, smol_tokenizer):
    renderer = ChatRenderer(smol_tokenizer)
    row = draw_rows(pool, renderer, 1, 3, random.Random(3))[0]
    assert isinstance(row, ExperienceRow) and row.kind in ("same-rule", "mixed")
    decoded = smol_tokenizer.decode(row.context_ids)
    assert "Privileged information:" in decoded and "Experience from related tasks:" in decoded
    assert experience_text_message(["x"])["role"] == "user"


def test_sft_with_an_experience_suite_mixes_both_kinds_of_step(tmp_path):
    from lopd.sft import run_sft

    adapter = run_sft(model="tiny-random", out_dir=str(tmp_path / "sft"), steps=6, n_tasks=40,
                      threads=1, batch_size=2, experience_suite="toolworld-rules-icl",
                      experience_share=0.5)
    report = json.loads((tmp_path / "sft" / "sft.json").read_text())
    assert (adapter / "adapter_config.json").is_file()
    assert set(report["step_kinds"]) == {"plain", "experience"}
    assert report["experience_suite"] == "toolworld-rules-icl" and len(report["losses"]) == 6


def test_row_by_row_backward_gives_the_batch_gradient(pool, smol_tokenizer):
    from lopd.sft_experience import experience_backward

    model, tokenizer = load_model("tiny-random")
    student = add_adapter(model, "acc-test", LoraSpec(r=4, alpha=8))
    with torch.no_grad():
        for name, param in student.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)
    rows = draw_rows(pool, ChatRenderer(smol_tokenizer), 3, 2, random.Random(4))
    params = [p for n, p in student.named_parameters() if "acc-test" in n]
    batch = experience_sft_loss(student, rows, tokenizer.pad_token_id)
    batch.backward()
    wanted = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    value = experience_backward(student, rows, tokenizer.pad_token_id, dtype="fp32")
    assert value == pytest.approx(float(batch), rel=1e-5)
    for p, grad in zip(params, wanted):
        assert torch.allclose(p.grad, grad, rtol=1e-4, atol=1e-7)
