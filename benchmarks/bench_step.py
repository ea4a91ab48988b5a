"""Step-time breakdown: one LOPD step vs one GRPO step on the same batch.

Both trainers start from the same model and warm-start adapter, draw the same tasks with the same
seed, and so produce the same rollouts (the LoRA student starts identical in both); the step
time is split into generate / compose / teacher / update. LOPD's one-off costs (bank seeding,
composer cold start) happen before the step and are reported separately.

    .venv/bin/python benchmarks/bench_step.py [--model smollm2-135m] [--adapter runs/sft/adapter]

Writes benchmarks/results/step_time.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from lopd.config import load_config
from lopd.trainer import Trainer

RESULTS = Path(__file__).parent / "results"


def one_step(method: str, args, out: Path) -> dict:
    overrides = [
        f"method.name={method}", f"model.name={args.model}", f"run.out_dir={out / method}",
        f"optim.tasks_per_step={args.tasks}", f"optim.group_size={args.group}",
        f"optim.micro_batch={args.micro_batch}", f"rollout.max_steps={args.max_steps}",
        f"rollout.max_new_tokens={args.max_new_tokens}", "run.tensorboard=false",
        f"run.threads={args.threads}", f"method.seed_experiences={args.seed_experiences}",
        f"method.cold_start_steps={args.cold_start_steps}", "data.eval_tasks=1",
    ]
    if args.adapter:
        overrides.append(f"model.init_adapter={args.adapter}")
    started = time.perf_counter()
    trainer = Trainer(load_config(None, overrides))
    setup = time.perf_counter() - started
    metrics = trainer.train_step(0)
    times = {k[5:]: v for k, v in metrics.items() if k.startswith("time/")}
    return {"setup_seconds": round(setup, 1), "times": times,
            "action_tokens": metrics["action_tokens"], "reward": metrics["reward"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--adapter", default="runs/sft/adapter")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed-experiences", type=int, default=60)
    parser.add_argument("--cold-start-steps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        grpo = one_step("grpo", args, Path(tmp))
        lopd = one_step("lopd", args, Path(tmp))
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    ratio = lopd["times"]["total"] / grpo["times"]["total"]
    train_ratio = ((lopd["times"]["total"] - lopd["times"]["generate"])
                   / max(grpo["times"]["total"] - grpo["times"]["generate"], 1e-9))
    result = {"args": vars(args), "grpo": grpo, "lopd": lopd, "lopd_over_grpo": round(ratio, 3),
              "lopd_over_grpo_excluding_generation": round(train_ratio, 3),
              "peak_rss_gb_process": round(peak_gb, 2)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "step_time.json").write_text(json.dumps(result, indent=2))
    keys = ["generate", "compose", "teacher", "update", "total"]
    rows = [f"| {name} | " + " | ".join(f"{r['times'].get(k, 0.0):.1f}" for k in keys) + " |"
            for name, r in (("GRPO", grpo), ("LOPD", lopd))]
    command = "`.venv/bin/python benchmarks/bench_step.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()) + "`"
    (RESULTS / "step_time.md").write_text("\n".join([
        "# Step time: LOPD vs GRPO on the same batch", "", command, "",
        (f"{args.tasks} tasks x {args.group} rollouts, up to {args.max_steps} turns of "
         f"{args.max_new_tokens} tokens, {args.threads} threads, fp32 (no fast bf16 on this CPU)."), "",
        "| method | generate s | compose s | teacher s | update s | total s |",
        "|---|---|---|---|---|---|", *rows, "",
        (f"LOPD / GRPO step time: **{ratio:.2f}x** (target <= 1.25x); excluding generation: "
         f"{train_ratio:.2f}x. LOPD setup (bank seeding + cold start, once per run): "
         f"{lopd['setup_seconds']} s."), ""]))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
