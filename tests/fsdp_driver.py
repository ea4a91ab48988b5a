"""One LOPD training step on a fixed batch, in one process or sharded (for tests/test_fsdp.py).

``python tests/fsdp_driver.py OUT override...`` (alone, or under ``accelerate launch``). The
step's rollouts are replaced by the reference trajectories of its tasks (two per task, so they
carry signal and every process gets the same batch whatever it samples) and the bank is left
as seeded, so a one-process run and a sharded run see the same global batch. The tiny random
model's distributions are all near uniform, which leaves distillation gradients at the level of
float rounding; the student's output matrix is therefore scaled by 20 once the teacher copy is
made, so that student and teacher differ and every loss has a real gradient. The main process
writes ``OUT/result.pt``: the step's losses averaged over processes, and the whole student and
composer after the update. A sharded run then writes its sharded checkpoint.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import torch

from lopd import distributed
from lopd.config import load_config
from lopd.reference import reference_trajectory
from lopd.trainer import Trainer


def fixed_rollouts(trainer: Trainer):
    """``rt.rollout`` replaced: each task's reference trajectory twice, one group per task."""
    def rollout(tasks, step):
        trajs = []
        for group, task in enumerate(tasks):
            for _ in range(trainer.config.optim.group_size):
                traj = reference_trajectory(task, trainer.rt.renderer)
                traj.group = group
                trajs.append(traj)
        return trajs
    return rollout


def student_state(trainer: Trainer) -> dict[str, torch.Tensor]:
    """The whole student on the main process (gathered from the shards when sharded)."""
    if trainer.rt.sharded:
        from lopd.fsdp import full_state

        return full_state(trainer.rt.model)
    return {k: v.detach().clone() for k, v in trainer.rt.model.state_dict().items()}


@contextmanager
def sharpened_student():
    """``lopd.runtime_build._build_model`` wrapped for the block: the student's output matrix times
    20 (the frozen teacher copy is made before, from the untouched weights)."""
    import lopd.runtime_build

    build = lopd.runtime_build._build_model

    def sharpened(config):
        model, tokenizer, teacher = build(config)
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(20.0)
        return model, tokenizer, teacher

    lopd.runtime_build._build_model = sharpened
    try:
        yield
    finally:
        lopd.runtime_build._build_model = build


def main(out: str, overrides: list[str]) -> None:
    config = load_config(None, [*overrides, f"run.out_dir={out}"])
    with sharpened_student():
        trainer = Trainer(config)
    trainer.rt.rollout = fixed_rollouts(trainer)
    trainer.rt.update_bank = lambda trajs, step: None
    before = student_state(trainer)
    metrics = trainer.train_step(0)
    losses = {key: distributed.mean_scalar(metrics[key]) for key in ("distill", "anchor")}
    losses.update(delta=metrics["delta"], beta=metrics["beta"])
    student = student_state(trainer)
    composer = {k: v.detach().clone() for k, v in trainer.rt.composer.state_dict().items()}
    if trainer.main:
        torch.save({"losses": losses, "before": before, "student": student,
                    "composer": composer}, Path(out) / "result.pt")
    trainer.step = 1
    trainer.checkpoint()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
