"""End to end on the tiny model: every method trains, LOPD's composer moves, resume is exact."""

import json

import pytest
import torch

from lopd.config import load_config
from lopd.trainer import Trainer


def _config(tmp_path, method, steps=2, **extra):
    overrides = [
        "model.name=tiny-random", "model.dtype=fp32", f"method.name={method}",
        f"optim.steps={steps}", "optim.tasks_per_step=2", "optim.group_size=2",
        "optim.micro_batch=2", "optim.student_lr=0.01", "optim.composer_lr=0.01",
        "rollout.max_steps=2", "rollout.max_new_tokens=8", "data.max_train_tasks=40",
        "data.eval_tasks=4", "method.latent_tokens=4", "method.num_experiences=2",
        "method.seed_experiences=12", "method.cold_start_steps=2", "method.experience_chars=200",
        "run.threads=1", "run.checkpoint_every=1", "run.keep_checkpoints=5",
        "run.tensorboard=false", f"run.out_dir={tmp_path / method}",
        *[f"{k}={v}" for k, v in extra.items()],
    ]
    return load_config(None, overrides)


def _snapshot(params):
    return [p.detach().clone() for p in params]


def _moved(before, params):
    return any(not torch.equal(a, b.detach()) for a, b in zip(before, params))


def _with_one_success_per_group(trainer):
    """The tiny random model never succeeds, which leaves GRPO, SDPO and Skill-SD without
    signal; to exercise their updates, the first rollout of every group is replaced by the
    task's reference solution (a real, successful trajectory of the same environment)."""
    from lopd.reference import reference_trajectory

    rollout = trainer.rt.rollout

    def patched(tasks, step):
        trajs = rollout(tasks, step)
        seen = set()
        for index, traj in enumerate(trajs):
            if traj.group not in seen:
                seen.add(traj.group)
                ref = reference_trajectory(traj.task, trainer.rt.renderer)
                ref.group = traj.group
                trajs[index] = ref
        return trajs

    trainer.rt.rollout = patched


@pytest.mark.parametrize("method", ["lopd", "grpo", "sdft", "opsd", "sdpo", "skill-sd"])
def test_each_method_trains(tmp_path, method):
    trainer = Trainer(_config(tmp_path, method))
    if method in ("grpo", "sdpo", "skill-sd"):
        _with_one_success_per_group(trainer)
    student = _snapshot(trainer.rt.student_parameters())
    composer = _snapshot(trainer.rt.composer.trainable_parameters()) if trainer.rt.composer else None
    history = trainer.fit()
    assert len(history) == 2
    for row in history:
        assert all(torch.isfinite(torch.tensor(float(v))) for k, v in row.items()
                   if isinstance(v, (int, float)))
    assert sum(row["signal_rows"] for row in history) > 0
    assert _moved(student, trainer.rt.student_parameters())
    if method == "lopd":
        assert _moved(composer, trainer.rt.composer.trainable_parameters())
        assert (tmp_path / method / "composer_phi0" / "composer.safetensors").exists()
        assert trainer.rt.bank.count() >= 1


def test_sdpo_without_a_success_gives_no_signal(tmp_path):
    trainer = Trainer(_config(tmp_path, "sdpo"))
    student = _snapshot(trainer.rt.student_parameters())
    history = trainer.fit()
    assert all(row["success"] == 0 for row in history)  # the tiny model never succeeds
    assert sum(row["signal_rows"] for row in history) == 0
    assert not _moved(student, trainer.rt.student_parameters())


def test_frozen_composer_does_not_move(tmp_path):
    trainer = Trainer(_config(tmp_path, "lopd", **{"method.freeze_composer": "true"}))
    composer = _snapshot(trainer.rt.composer.trainable_parameters())
    trainer.fit()
    assert not _moved(composer, trainer.rt.composer.trainable_parameters())


def test_composer_recompute_and_chunks_give_the_same_gradients(tmp_path):
    """optim.composer_recompute only moves the encoder forward, and optim.composer_chunk only
    splits its backward by task (with 3 tasks, chunks of 2 leave one of 1): same loss terms,
    same anchor, same grads."""
    trainer = Trainer(_config(tmp_path, "lopd", **{"optim.tasks_per_step": 3,
                                                   "method.anchor_weight": 0.5}))
    rt = trainer.rt
    trajs = rt.rollout(trainer.sample_tasks(0), 0)
    rt.update_bank(trajs, 0)
    rt.optimizer_step = lambda: None  # keep the gradients of one update
    with torch.no_grad():  # move the composer off phi_0 so that the anchor is not zero
        for param in rt.composer.trainable_parameters():
            param.add_(0.01 * torch.randn_like(param))
    seen = {}
    for recompute, chunk in ((False, 0), (True, 0), (True, 1), (True, 2)):
        trainer.config.optim.composer_recompute = recompute
        trainer.config.optim.composer_chunk = chunk
        context = rt.context(trajs, 0)
        assert context.task_latent.requires_grad is not recompute
        assert context.task_latent.shape[0] == 3
        terms, anchor = trainer.update(trajs, context, {})
        grads = [p.grad.clone() for p in rt.composer.trainable_parameters()]
        seen[recompute, chunk] = (terms.distill, terms.delta, anchor, grads)
    reference = seen[False, 0]
    assert reference[3][0].abs().sum() > 0  # the composer got a gradient
    assert reference[2] > 0  # and an anchor
    for key, found in seen.items():
        for a, b in zip(found[:3], reference[:3]):
            assert a == pytest.approx(b, rel=1e-5, abs=1e-6), key
        for a, b in zip(found[3], reference[3], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_composer_chunk_pads_a_chunk_with_fewer_experiences():
    from lopd.runtime import _pad_slots

    latent = torch.ones(2, 4, 3)
    padded = _pad_slots(latent, 6)
    assert padded.shape == (2, 6, 3)
    assert torch.equal(padded[:, :4], latent) and not padded[:, 4:].any()
    assert _pad_slots(latent, 4) is latent


@pytest.mark.parametrize("student", ["lora", "full"])
def test_activation_checkpointing_gives_the_same_gradients(tmp_path, student):
    """optim.activation_checkpointing replays layers in the backward (layer 0's first norm runs
    more often), under the right adapters, and changes no gradient of student or composer."""
    from lopd.models import enable_activation_checkpointing

    trainer = Trainer(_config(tmp_path, "lopd", **{"optim.share_prefix": "false",
                                                   "model.student": student}))
    rt = trainer.rt
    trajs = rt.rollout(trainer.sample_tasks(0), 0)
    rt.update_bank(trajs, 0)
    rt.optimizer_step = lambda: None  # keep the gradients of one update
    calls = []
    for model in (rt.model, rt.teacher_model):
        if model is not None:
            enable_activation_checkpointing(model)
            model.get_decoder().layers[0].input_layernorm.register_forward_hook(
                lambda *_: calls.append(1))
    seen = {}
    for flag in (False, True):
        trainer.config.optim.activation_checkpointing = flag
        calls.clear()
        trainer.update(trajs, rt.context(trajs, 0), {})
        params = rt.student_parameters() + rt.composer.trainable_parameters()
        seen[flag] = (len(calls), [p.grad.clone() for p in params])
        assert not rt.model.training  # back to eval mode for generation
    assert seen[True][0] > seen[False][0]
    for a, b in zip(seen[True][1], seen[False][1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_lopd_trains_with_activation_checkpointing(tmp_path):
    """Set in the config: cold start and steps run checkpointed; generation stays in eval."""
    trainer = Trainer(_config(tmp_path, "lopd", **{"optim.activation_checkpointing": "true"}))
    assert not trainer.rt.model.training
    composer = _snapshot(trainer.rt.composer.trainable_parameters())
    history = trainer.fit()
    assert sum(row["signal_rows"] for row in history) > 0
    assert _moved(composer, trainer.rt.composer.trainable_parameters())


def _metrics(path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    keys = ("step", "rollouts", "reward", "distill", "delta", "beta", "anchor", "action_tokens")
    return [{k: row[k] for k in keys} for row in rows if "reward" in row]


def assert_resume_repeats(tmp_path, **extra):
    """4 steps straight vs 2 steps, a "kill", ``--resume``, 2 more: the same metrics, bit for
    bit on a CPU (``tests/test_resume.py`` also compares weights and optimiser states)."""
    straight = Trainer(_config(tmp_path / "a", "lopd", steps=4, **extra))
    straight.fit()
    first = Trainer(_config(tmp_path / "b", "lopd", steps=2, **extra))
    first.fit()
    del first  # the "kill": only what was checkpointed survives
    resumed = Trainer(_config(tmp_path / "b", "lopd", steps=4, **extra), resume=True)
    assert resumed.step == 2
    resumed.fit()
    a = _metrics(straight.metrics_path)
    b = _metrics(resumed.metrics_path)
    assert [r["step"] for r in b] == [0, 1, 2, 3]
    exact = extra.get("model.device") == "cpu"
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x:
            if exact:
                assert x[key] == y[key], (x["step"], key, x[key], y[key])
            else:  # GPU kernels: deterministic mode, compared up to rounding
                assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-9), (x["step"], key)


def test_resume_repeats_the_uninterrupted_run(tmp_path):
    assert_resume_repeats(tmp_path, **{"model.device": "cpu"})  # tests/test_gpu.py: on a GPU


def test_export_gives_a_plain_hf_model_equal_to_the_student(tmp_path):
    from transformers import AutoModelForCausalLM

    from lopd.policy import export_student
    from lopd.teacher import adapters_disabled

    trainer = Trainer(_config(tmp_path, "opsd"))
    trainer.fit()
    out = export_student(trainer.out, tmp_path / "exported", merge=True)
    exported = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    device = trainer.rt.device
    with torch.no_grad():
        expected = trainer.rt.model(input_ids=ids.to(device)).logits.cpu()
        got = exported(input_ids=ids).logits
        with adapters_disabled(trainer.rt.model):
            base = trainer.rt.model(input_ids=ids.to(device)).logits.cpu()
    assert torch.allclose(expected, got, atol=1e-4)
    assert not torch.allclose(base, got, atol=1e-4)  # the trained student, not the base
    adapter = export_student(trainer.out, tmp_path / "adapter")
    assert (adapter / "adapter_config.json").is_file()


def test_signal_rows_skip_rows_without_gradient():
    from lopd.trainer import signal_rows

    active = torch.tensor([True, True, False, True, True])
    assert signal_rows(active, None) == [0, 1, 3, 4]
    advantages = torch.tensor([0.7, -0.7, 0.5, 0.0, 0.0])
    assert signal_rows(torch.ones(5, dtype=torch.bool), advantages) == [0, 1, 2]
    assert signal_rows(active, advantages) == [0, 1]


def test_grpo_skips_groups_without_advantage_and_keeps_the_gradient(tmp_path, monkeypatch):
    """A group whose rollouts all scored the same has zero advantages: its rows are not
    forwarded, and the packed micro-batches give the gradient of running every row."""
    import lopd.trainer as trainer_module
    from lopd.reference import reference_trajectory

    trainer = Trainer(_config(tmp_path, "grpo", **{"optim.tasks_per_step": 3}))
    rt = trainer.rt
    trajs = rt.rollout(trainer.sample_tasks(0), 0)
    first = trajs[0]
    trajs[0] = reference_trajectory(first.task, rt.renderer)  # only group 0 has a success
    trajs[0].group = first.group
    rewards = {t.group: set() for t in trajs}
    for traj in trajs:
        rewards[traj.group].add(traj.reward)
    assert sum(len(r) > 1 for r in rewards.values()) == 1  # one group with signal, two without
    rt.optimizer_step = lambda: None  # keep the gradients of one update
    forwards = []
    student_logits = rt.student_logits
    rt.student_logits = lambda batch: forwards.append(batch.input_ids.shape[0]) or student_logits(batch)
    seen = {}
    for skip in (False, True):
        if not skip:
            monkeypatch.setattr(trainer_module, "signal_rows",
                                lambda active, advantages: list(range(len(active))))
        else:
            monkeypatch.undo()
        forwards.clear()
        terms, _ = trainer.update(trajs, None, {})
        seen[skip] = ([p.grad.clone() for p in rt.student_parameters()], list(forwards), terms)
    assert sum(seen[False][1]) == len(trajs) and sum(seen[True][1]) == 2
    assert float(seen[True][2].distill) == float(seen[False][2].distill) == 0.0
    assert any(g.abs().sum() > 0 for g in seen[True][0])
    for a, b in zip(seen[True][0], seen[False][0], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-8)


def test_train_max_steps_caps_training_rollouts_only(tmp_path, monkeypatch):
    """rollout.train_max_steps caps training episodes; evaluation keeps rollout.max_steps."""
    import lopd.rollout

    trainer = Trainer(_config(tmp_path, "grpo", **{"rollout.max_steps": 3,
                                                   "rollout.train_max_steps": 1}))
    caps = []
    real = lopd.rollout.run_episodes

    def recording(envs, backend, renderer, config, **kwargs):
        caps.append((config.max_steps, {env.max_steps for env in envs}))
        return real(envs, backend, renderer, config, **kwargs)

    monkeypatch.setattr(lopd.rollout, "run_episodes", recording)
    trajs = trainer.rt.rollout(trainer.sample_tasks(0), 0)
    assert trajs and all(len(t.turn_spans) <= 1 for t in trajs)
    trainer.config.rollout.train_max_steps = 0
    trainer.rt.rollout(trainer.sample_tasks(0), 0)
    assert caps == [(1, {1}), (3, {3})]
    assert trainer.config.rollout.max_steps == 3  # the evaluation cap is untouched


def test_eval_max_new_tokens_caps_the_evaluation_only(tmp_path, monkeypatch):
    """rollout.eval_max_new_tokens caps held-out turns; training keeps rollout.max_new_tokens."""
    import lopd.evaluate
    import lopd.rollout

    trainer = Trainer(_config(tmp_path, "grpo", **{"rollout.max_new_tokens": 12,
                                                   "rollout.eval_max_new_tokens": 5}))
    budgets = []
    real_eval, real_episodes = lopd.evaluate.evaluate_tasks, lopd.rollout.run_episodes

    def evaluating(backend, renderer, tasks, rollout, **kwargs):
        budgets.append(("eval", rollout.max_new_tokens))
        return real_eval(backend, renderer, tasks, rollout, **kwargs)

    def training(envs, backend, renderer, config, **kwargs):
        budgets.append(("train", config.max_new_tokens))
        return real_episodes(envs, backend, renderer, config, **kwargs)

    monkeypatch.setattr(lopd.evaluate, "evaluate_tasks", evaluating)
    trainer.evaluate()
    monkeypatch.setattr(lopd.rollout, "run_episodes", training)
    trainer.rt.rollout(trainer.sample_tasks(0), 0)
    assert budgets == [("eval", 5), ("train", 12)]


@pytest.mark.parametrize("option", ["optim.length_sorted", "optim.trim_after_last_action"])
@pytest.mark.parametrize("method", ["lopd", "grpo"])
def test_exact_update_options_give_the_same_gradients(tmp_path, method, option):
    """optim.length_sorted only reorders the step's rows before micro-batches are cut, and
    optim.trim_after_last_action only drops tokens after each row's last action: the loss terms
    and every gradient (student and composer) are those of the plain update."""
    from lopd.batch import kept_length
    from lopd.trainer import by_group_and_length

    trainer = Trainer(_config(tmp_path, method, **{"optim.group_size": 4}))
    _with_one_success_per_group(trainer)  # the reference rollouts differ in length
    rt = trainer.rt
    trajs = rt.rollout(trainer.sample_tasks(0), 0)
    rt.update_bank(trajs, 0)
    rows = list(range(len(trajs)))
    if option == "optim.length_sorted":  # the option changes the micro-batches
        assert by_group_and_length(trajs, rows) != rows
        assert [trajs[r].group for r in by_group_and_length(trajs, rows)] == sorted(
            t.group for t in trajs)
    else:  # rollouts cut at the turn limit end with an observation
        assert any(kept_length(t) < len(t.input_ids) for t in trajs)
    rt.optimizer_step = lambda: None  # keep the gradients of one update
    params = rt.student_parameters() + (rt.composer.trainable_parameters() if rt.composer else [])
    section, name = option.split(".")
    seen = {}
    for enabled in (False, True):
        setattr(getattr(trainer.config, section), name, enabled)
        context = rt.context(trajs, 0) if method == "lopd" else None
        terms, _ = trainer.update(trajs, context, {})
        seen[enabled] = (terms.distill, terms.delta, terms.rows,
                         [p.grad.clone() for p in params if p.grad is not None])
    plain, changed = seen[False], seen[True]
    assert plain[2] == changed[2] > 0
    assert changed[0] == pytest.approx(plain[0], rel=1e-5, abs=1e-6)
    assert changed[1] == pytest.approx(plain[1], rel=1e-5, abs=1e-6)
    assert len(plain[3]) == len(changed[3]) > 0
    for a, b in zip(changed[3], plain[3], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_step_status_shows_the_quantities_of_its_method():
    from lopd.trainer import step_status

    metrics = {"reward": 0.5, "distill": 0.0123, "delta": 0.004, "beta": 0.25, "signal_rows": 6,
               "time/total": 12.0}
    grpo = step_status("grpo", metrics)
    assert "signal rows 6" in grpo and "distill" not in grpo and "beta" not in grpo
    sdft = step_status("sdft", metrics)
    assert "distill 0.012" in sdft and "beta" not in sdft and "delta" not in sdft
    lopd = step_status("lopd", metrics)
    assert "distill 0.012" in lopd and "delta +0.004" in lopd and "beta 0.250" in lopd
    assert all(line.startswith("reward 0.50") and line.endswith("(12 s)")
               for line in (grpo, sdft, lopd))
