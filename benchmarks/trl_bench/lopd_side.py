"""The lopd side of the lopd-vs-TRL benchmark: ``lopd.trainer.Trainer`` steps, timed one by one.

Runs in its own child process. The trainer is configured to do the same job as TRL's (see
``bench_trl.py``); its task sampling is replaced by the benchmark's fixed order, and for SDFT its
demonstrations are rebuilt from whole reference trajectories and the teacher's privileged-context
length is recorded, so both sides can be compared step by step.
"""

from __future__ import annotations

import time

from benchmarks.trl_bench.common import bench_tasks, cpu_seconds, demo_text


def lopd_overrides(args) -> list[str]:
    """lopd config overrides that match TRL's setup (model, LoRA, batch, optimiser, rollout)."""
    total = args.prompts * (args.warmup + args.steps)
    return [
        f"method.name={args.method}", f"model.name={args.model}", "model.dtype=fp32",
        "model.student=lora", "model.lora_r=16", "model.lora_alpha=32",
        f"run.out_dir={args.workdir}", f"run.threads={args.threads}", "run.seed=0",
        "run.tensorboard=false", f"optim.tasks_per_step={args.prompts}",
        f"optim.group_size={args.generations}", f"optim.micro_batch={args.micro_batch}",
        f"optim.student_lr={args.lr}", "optim.weight_decay=0.0", "optim.grad_clip=1.0",
        "rollout.max_steps=1", f"rollout.max_new_tokens={args.max_new_tokens}",
        "rollout.temperature=1.0", "rollout.top_p=1.0", "data.train_suite=toolworld-train",
        f"data.max_train_tasks={total}", "data.eval_tasks=1", "method.clip_eps=0.2",
        "method.jsd_beta=0.5",
    ]


def fix_task_order(trainer, args) -> list:
    """Replace lopd's seeded task sampling with the benchmark's fixed order (TRL's order)."""
    tasks = trainer.rt.train_tasks
    assert [t.id for t in tasks] == [t.id for t in bench_tasks(args)]
    trainer.sample_tasks = lambda step: tasks[args.prompts * step: args.prompts * (step + 1)]
    return tasks


def use_whole_task_demos(trainer, tasks) -> list[float]:
    """SDFT: give the teacher whole-task demonstrations (see ``demo_text``) and record how many
    tokens of privileged text it gets per row; returns that list, one entry per step."""
    trainer.rt.demos = {t.id: demo_text(t, trainer.rt.renderer) for t in tasks if t.reference}
    original_context = trainer.rt.context
    context_tokens: list[float] = []

    def context(trajs, step):  # records how many tokens of privileged text the teacher gets
        built = original_context(trajs, step)
        context_tokens.append(sum(map(len, built.text_ids)) / max(len(built.text_ids), 1))
        return built

    trainer.rt.context = context
    return context_tokens


def timed_step(trainer, args, step: int, context_tokens: list[float]) -> dict:
    """One ``Trainer.train_step``: wall and CPU seconds, time split, tokens and reward."""
    import torch

    cpu0, t0 = cpu_seconds(), time.perf_counter()
    metrics = trainer.train_step(step)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    split = {k[5:]: v for k, v in metrics.items() if k.startswith("time/") and k != "time/total"}
    record = {
        "step": step, "warmup": step < args.warmup, "seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2), "split": split,
        "tokens_generated": int(metrics["action_tokens"]), "reward": metrics["reward"],
        "signal_rows": metrics["signal_rows"],
        "privileged_context_tokens": context_tokens[-1] if context_tokens else None,
        "task_ids": [t.id for t in trainer.sample_tasks(step)],
        "threads": torch.get_num_threads(),
    }
    print(f"[lopd {args.method}] step {step}: {wall:.1f} s, {metrics['action_tokens']} tokens",
          flush=True)
    return record


def lopd_model_checks(trainer) -> dict:
    """Settings that must match TRL's: no gradient checkpointing, fp32, trainable LoRA size."""
    model = trainer.rt.model
    return {"gradient_checkpointing": bool(getattr(model.get_base_model(),
                                                   "is_gradient_checkpointing", False)),
            "model_dtype": str(model.dtype), "trainable_parameters":
            sum(p.numel() for p in trainer.rt.student_parameters())}


def run_lopd(args) -> dict:
    """The lopd child: build the trainer (timed as setup), then warm-up + timed steps."""
    from lopd.config import load_config
    from lopd.trainer import Trainer

    overrides = lopd_overrides(args)
    started = time.perf_counter()
    trainer = Trainer(load_config(None, overrides))
    setup = time.perf_counter() - started
    tasks = fix_task_order(trainer, args)
    context_tokens: list[float] = []
    if args.method == "sdft":  # whole-task demonstrations (see demo_text)
        context_tokens = use_whole_task_demos(trainer, tasks)
    steps = [timed_step(trainer, args, step, context_tokens)
             for step in range(args.warmup + args.steps)]
    return {"setup_seconds": round(setup, 1), "steps": steps,
            "checks": lopd_model_checks(trainer)}
