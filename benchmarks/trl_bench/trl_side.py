"""The TRL side of the lopd-vs-TRL benchmark: ``GRPOTrainer`` / ``SDFTTrainer`` on lopd's inputs.

Runs in its own child process, with TRL imported from ``.bench-site`` (TRL is not a lopd
dependency). It builds the same prompts as lopd (and checks that the tokens match), configures
TRL to do the same job, times the trainer's construction and its steps (``trl_hooks``), and
returns per-step records in the lopd side's format.
"""

from __future__ import annotations

import os
import sys
import time

from benchmarks.trl_bench.common import BENCH_SITE, LORA_TARGETS, bench_tasks, demo_block
from benchmarks.trl_bench.trl_hooks import (
    StepTimings,
    step_timer_callback,
    time_generation,
    time_sdft_teacher,
    toolworld_reward_func,
)


def import_trl_stack() -> None:
    """Import TRL and everything the TRL side uses, first thing in the child.

    ``.bench-site`` (TRL and its few extra deps) is appended to sys.path, so it never shadows
    the .venv's packages. The imports run before the runtime is set up and before anything is
    timed; the functions below import the names they use again (already loaded).
    """
    sys.path.append(str(BENCH_SITE))  # TRL and its few extra deps; never shadows .venv
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch  # noqa: F401
    import trl  # noqa: F401
    from datasets import Dataset  # noqa: F401
    from datasets.table import InMemoryTable  # noqa: F401
    from peft import LoraConfig  # noqa: F401
    from transformers import AutoTokenizer, TrainerCallback  # noqa: F401

    from lopd.chat import ChatRenderer  # noqa: F401
    from lopd.envs import make_env  # noqa: F401
    from lopd.models import resolve_model_dir, setup_runtime  # noqa: F401


def trl_dataset(args, tasks: list, tokenizer, renderer):
    """The tasks as TRL's conversational prompts (+ SDFT's privileged context); stops if TRL's
    chat template gives other token ids than lopd's ``ChatRenderer``."""
    from datasets import Dataset
    from datasets.table import InMemoryTable

    from lopd.envs import make_env

    rows = []
    for task in tasks:
        messages = make_env(task, max_steps=1).reset().messages
        lopd_ids, _ = renderer.render(messages, add_generation_prompt=True)
        trl_ids = tokenizer.apply_chat_template(conversation=[messages], add_generation_prompt=True,
                                                tokenize=True, return_dict=True)["input_ids"][0]
        if list(trl_ids) != lopd_ids:
            raise SystemExit(f"prompt ids differ between lopd and TRL for {task.id}")
        row = {"prompt": [dict(m) for m in messages], "task_id": task.id}
        if args.method == "sdft":
            row["privileged_context"] = demo_block(task, renderer, args.experience_chars)
        rows.append(row)
    # Dataset.from_list would fingerprint the table with dill, which fails in this environment
    # (datasets 5.2.0 + dill 0.4.1 + pyarrow: "Can't pickle <class 'MonthDayNano'>"); a given
    # fingerprint skips that hashing. TRL only indexes the dataset (no .map on it).
    return Dataset(InMemoryTable.from_pylist(rows), fingerprint=f"bench-trl-{args.method}")


def trl_config_args(args) -> dict:
    """The training arguments GRPO and SDFT share, matching lopd's settings."""
    import torch

    return {
        "output_dir": str(args.workdir), "per_device_train_batch_size": args.micro_batch,
        "gradient_accumulation_steps": args.prompts * args.generations // args.micro_batch,
        "num_generations": args.generations, "max_completion_length": args.max_new_tokens,
        "temperature": 1.0, "top_p": 1.0, "top_k": 0, "learning_rate": args.lr,
        "lr_scheduler_type": "constant", "warmup_steps": 0, "weight_decay": 0.0, "max_grad_norm": 1.0,
        "optim": "adamw_torch", "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8,
        "num_iterations": 1, "max_steps": args.warmup + args.steps, "logging_steps": 1,
        "report_to": "none", "save_strategy": "no", "bf16": False, "fp16": False,
        "gradient_checkpointing": False, "use_cpu": True, "seed": 0, "shuffle_dataset": False,
        "disable_tqdm": True, "dataloader_num_workers": 0, "model_init_kwargs": {"dtype": torch.float32},
    }


def build_grpo_trainer(model_dir: str, common: dict, dataset, tokenizer, peft_config,
                       timings: StepTimings, by_id: dict):
    """``trl.GRPOTrainer`` without KL, one pass, clip 0.2; generation and reward timed."""
    from trl import GRPOConfig, GRPOTrainer

    config = GRPOConfig(**common, beta=0.0, epsilon=0.2, loss_type="grpo",
                        scale_rewards="group", mask_truncated_completions=False)
    trainer = GRPOTrainer(model=model_dir, reward_funcs=toolworld_reward_func(by_id, timings),
                          args=config, train_dataset=dataset, processing_class=tokenizer,
                          peft_config=peft_config, callbacks=[step_timer_callback(timings)])
    time_generation(trainer, timings)
    trainer._calculate_rewards = timings.timed("reward", trainer._calculate_rewards)
    return trainer


def build_sdft_trainer(model_dir: str, common: dict, dataset, tokenizer, peft_config,
                       timings: StepTimings):
    """TRL's experimental ``SDFTTrainer`` (frozen-base teacher, full-vocabulary JSD beta 0.5);
    generation and the teacher forward timed."""
    from trl.experimental.sdft import SDFTConfig, SDFTTrainer

    config = SDFTConfig(**common, teacher_model_kind="base", distillation_mode="full_logits",
                        distillation_alpha=0.5, max_prompt_length=None,
                        generate_from_teacher=False)
    trainer = SDFTTrainer(model=model_dir, args=config, train_dataset=dataset,
                          processing_class=tokenizer, peft_config=peft_config,
                          callbacks=[step_timer_callback(timings)])
    time_generation(trainer, timings)
    time_sdft_teacher(trainer, timings)
    return trainer


def trl_model_checks(trainer) -> dict:
    """Settings that must match lopd's: no gradient checkpointing, fp32, trainable LoRA size."""
    base = (trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model")
            else trainer.model)
    return {"gradient_checkpointing": bool(getattr(base, "is_gradient_checkpointing", False)),
            "model_dtype": str(base.dtype), "trainable_parameters":
            sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
            "bf16": bool(trainer.args.bf16)}


def trl_step_records(args, measured: list[dict]) -> list[dict]:
    """TRL's measured steps as records in the lopd side's format (``update`` = the step's
    time outside the timed parts)."""
    steps = []
    for index, cur in enumerate(measured):
        split = {k: round(v, 3) for k, v in cur["split"].items()}
        split["update"] = round(cur["seconds"] - sum(cur["split"].values()), 3)
        interval = cur["end"] - measured[index - 1]["end"] if index else None
        steps.append({
            "step": index, "warmup": index < args.warmup, "seconds": round(cur["seconds"], 2),
            "seconds_between_step_ends": round(interval, 2) if interval else None,
            "cpu_seconds": round(cur["cpu_seconds"], 2), "split": split,
            "tokens_generated": cur["tokens_generated"],
            "reward": ((sum(cur.get("rewards", [])) / len(cur["rewards"]))
                       if cur.get("rewards") else None),
            "privileged_context_tokens": cur.get("privileged_context_tokens"),
            "task_ids": cur.get("task_ids"), "threads": cur["threads"],
        })
        print(f"[trl {args.method}] step {index}: {cur['seconds']:.1f} s, "
              f"{cur['tokens_generated']} tokens", flush=True)
    return steps


def check_task_order(args, tasks: list, steps: list[dict]) -> None:
    """GRPO: stop unless TRL's steps saw lopd's prompts in lopd's order. SDFT has no reward
    hook to record them; its steps get the fixed order (``shuffle_dataset=False``)."""
    expected = [[t.id for t in tasks[args.prompts * s: args.prompts * (s + 1)]]
                for s in range(args.warmup + args.steps)]
    if args.method == "grpo" and [s["task_ids"] for s in steps] != expected:
        raise SystemExit(f"TRL saw other prompts than lopd: {[s['task_ids'] for s in steps]}")
    if args.method == "sdft":
        for s, ids in zip(steps, expected):
            s["task_ids"] = ids  # fixed order, shuffle_dataset=False (no reward hook to record it)


def run_trl(args) -> dict:
    """The TRL child: build the trainer (timed as setup), train warm-up + timed steps."""
    import_trl_stack()
    import trl
    from peft import LoraConfig
    from transformers import AutoTokenizer

    from lopd.chat import ChatRenderer
    from lopd.models import resolve_model_dir, setup_runtime

    setup_runtime(threads=args.threads, seed=0)
    model_dir = str(resolve_model_dir(args.model))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    renderer = ChatRenderer(tokenizer)
    tasks = bench_tasks(args)
    dataset = trl_dataset(args, tasks, tokenizer, renderer)
    timings = StepTimings()
    common = trl_config_args(args)
    peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=LORA_TARGETS,
                             task_type="CAUSAL_LM")
    started = time.perf_counter()
    if args.method == "grpo":
        trainer = build_grpo_trainer(model_dir, common, dataset, tokenizer, peft_config, timings,
                                     {t.id: t for t in tasks})
    else:
        trainer = build_sdft_trainer(model_dir, common, dataset, tokenizer, peft_config, timings)
    setup = time.perf_counter() - started
    checks = trl_model_checks(trainer)
    trainer.train()
    steps = trl_step_records(args, timings.steps)
    check_task_order(args, tasks, steps)
    return {"setup_seconds": round(setup, 1), "steps": steps, "trl_version": trl.__version__,
            "model_dir": model_dir, "checks": checks}
