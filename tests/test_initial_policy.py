"""The teacher is the student's initial policy, warm start included (paper eq. 8).

A warm start (``model.init_adapter``: any PEFT LoRA) is merged into the base before the
student's adapter is added, so at step 0 and without context the teacher and the student give
the same logits, for LoRA and full students; evaluation and export see the same weights.
"""

import pytest
import torch

from lopd.batch import collate
from lopd.config import load_config
from lopd.models import load_model
from lopd.reference import reference_trajectory
from lopd.teacher import student_logits, teacher_logits


def _warm_start(tmp_path, rank=8, targets=("q_proj", "v_proj", "down_proj")):
    """A LoRA adapter with random (non-zero) weights, as `lopd sft` would write one."""
    from peft import LoraConfig, get_peft_model

    model, tokenizer = load_model("tiny-random")
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(targets),
                        task_type="CAUSAL_LM")
    peft = get_peft_model(model, config)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    out = tmp_path / "warm"
    peft.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _config(tmp_path, method="grpo", **extra):
    overrides = [
        "model.name=tiny-random", "model.dtype=fp32", f"method.name={method}",
        "optim.steps=1", "optim.tasks_per_step=2", "optim.group_size=2", "optim.micro_batch=2",
        "rollout.max_steps=2", "rollout.max_new_tokens=8", "data.max_train_tasks=40",
        "data.eval_tasks=4", "method.latent_tokens=4", "method.num_experiences=2",
        "method.seed_experiences=12", "method.cold_start_steps=1", "run.threads=1",
        "run.checkpoint_every=1", "run.tensorboard=false", f"run.out_dir={tmp_path / 'run'}",
        *[f"{k}={v}" for k, v in extra.items()],
    ]
    return load_config(None, overrides)


def _batch(rt, n=2):
    trajs = [reference_trajectory(t, rt.renderer) for t in rt.train_tasks[:n]]
    return collate(trajs, rt.pad_id)


@pytest.mark.parametrize("student", ["lora", "full"])
def test_teacher_equals_student_at_step_zero_with_warm_start(tmp_path, student):
    from lopd.runtime_build import build_runtime

    adapter = _warm_start(tmp_path)
    config = _config(tmp_path, "grpo", **{"model.student": student,
                                          "model.init_adapter": adapter})
    rt = build_runtime(config, tmp_path / "run")
    batch = _batch(rt)
    with torch.no_grad():
        s = student_logits(rt.model, batch)
        t = teacher_logits(rt.model, batch, teacher_model=rt.teacher_model)
        plain, _ = load_model("tiny-random")
        base = student_logits(plain, batch)
    assert torch.equal(s, t)
    assert (s - base).abs().max() > 1e-2  # the warm start really changed the model


def test_rank8_warm_start_under_rank16_student_trains(tmp_path):
    from lopd.trainer import Trainer

    adapter = _warm_start(tmp_path, rank=8, targets=("q_proj", "k_proj"))
    trainer = Trainer(_config(tmp_path, "sdft", **{"model.lora_r": 16,
                                                  "model.init_adapter": adapter}))
    history = trainer.fit()
    assert len(history) == 1


def test_missing_warm_start_is_a_clear_error(tmp_path):
    from lopd.models import ModelNotAvailable
    from lopd.runtime_build import build_runtime

    config = _config(tmp_path, "grpo", **{"model.init_adapter": tmp_path / "nowhere"})
    with pytest.raises(ModelNotAvailable, match="not a PEFT adapter directory"):
        build_runtime(config, tmp_path / "run")


@pytest.mark.parametrize("student", ["lora", "full"])
def test_export_and_run_policy_equal_trained_student(tmp_path, student):
    from transformers import AutoModelForCausalLM

    from lopd.policy import export_student, load_run_policy
    from lopd.trainer import Trainer

    adapter = _warm_start(tmp_path)
    trainer = Trainer(_config(tmp_path, "sdft", **{"model.student": student,
                                                  "model.init_adapter": adapter,
                                                  "optim.student_lr": 0.05}))
    trainer.fit()
    rt = trainer.rt
    batch = _batch(rt)
    with torch.no_grad():
        trained = student_logits(rt.model, batch)
        teacher = teacher_logits(rt.model, batch, teacher_model=rt.teacher_model)
        assert (trained - teacher).abs().max() > 1e-4  # the student moved off its start
        out = export_student(tmp_path / "run", tmp_path / "exported", merge=True)
        exported = AutoModelForCausalLM.from_pretrained(out).eval()
        from_run, _ = load_run_policy(tmp_path / "run", dtype="fp32", device="cpu")
        torch.testing.assert_close(student_logits(exported, batch), trained, atol=1e-4,
                                   rtol=1e-4)
        torch.testing.assert_close(student_logits(from_run, batch), trained, atol=1e-4,
                                   rtol=1e-4)


def test_unmerged_export_names_its_warm_started_base(tmp_path):
    import json

    from lopd.policy import export_student
    from lopd.trainer import Trainer

    adapter = _warm_start(tmp_path)
    Trainer(_config(tmp_path, "grpo", **{"model.init_adapter": adapter})).checkpoint()
    out = export_student(tmp_path / "run", tmp_path / "adapter-only")
    base = json.loads((out / "lopd_base.json").read_text())
    assert base["init_adapter"] == str(adapter)
    assert (out / "adapter_config.json").is_file()
