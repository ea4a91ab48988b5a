"""Step-time breakdown: LOPD vs GRPO on the same batch, with and without prefix sharing.

One batch of rollouts is generated once (the LoRA student starts identical for both methods, so
both would sample exactly these trajectories); then the rest of the step -- privileged context
(LOPD: retrieve + compose), teacher re-scoring, losses, backward, optimiser step -- is timed for
each method on that batch, interleaved over ``--repeats`` rounds (GRPO, LOPD, GRPO, LOPD, ...)
so that load from other processes hits both alike; the median of each is reported, and a step
is that median plus the shared generation time. ``optim.share_prefix`` is toggled on the same
trainers, so "shared" and "plain" differ in nothing else. LOPD's one-off costs (bank seeding,
composer cold start) happen before and are reported separately.

    .venv/bin/python benchmarks/bench_step.py [--model smollm2-135m] [--adapter runs/sft/adapter]
        [--device auto] [--dtype auto] [--name step_time] [--results-dir benchmarks/results]

Writes RESULTS_DIR/NAME.{json,md}. On a GPU every timed part ends with a device synchronise.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import tempfile
import time
from pathlib import Path

import torch

from lopd.config import load_config
from lopd.trainer import Trainer

RESULTS = Path(__file__).parent / "results"
PARTS = ["compose", "teacher", "update"]


def build(method: str, args, out: Path) -> tuple[Trainer, float]:
    overrides = [
        f"method.name={method}", f"model.name={args.model}", f"run.out_dir={out / method}",
        f"optim.tasks_per_step={args.tasks}", f"optim.group_size={args.group}",
        f"optim.micro_batch={args.micro_batch}", f"rollout.max_steps={args.max_steps}",
        f"rollout.max_new_tokens={args.max_new_tokens}", "run.tensorboard=false",
        f"run.threads={args.threads}", f"method.seed_experiences={args.seed_experiences}",
        f"method.cold_start_steps={args.cold_start_steps}", "data.eval_tasks=1",
        f"model.device={args.device}", f"model.dtype={args.dtype}",
    ]
    if args.adapter:
        overrides.append(f"model.init_adapter={args.adapter}")
    started = time.perf_counter()
    trainer = Trainer(load_config(None, overrides))
    return trainer, time.perf_counter() - started


def batch_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The model and the one batch of rollouts both step benchmarks measure (see ``build``)."""
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--adapter", default="runs/sft/adapter")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed-experiences", type=int, default=30)
    parser.add_argument("--cold-start-steps", type=int, default=2)
    return parser


def time_rest_of_step(trainer: Trainer, trajs, share: bool) -> dict:
    """Context + update on ``trajs`` (the optimiser steps: the cost is what is measured)."""
    trainer.config.optim.share_prefix = "true" if share else "false"
    timings: dict[str, float] = {}
    sync = torch.cuda.synchronize if trainer.rt.device.type == "cuda" else (lambda: None)
    sync()
    started = time.perf_counter()
    context = trainer.rt.context(trajs, 0) if trainer.config.method.name != "grpo" else None
    sync()
    timings["compose"] = time.perf_counter() - started
    mark = time.perf_counter()
    trainer.update(trajs, context, timings)
    sync()
    timings["update"] = time.perf_counter() - mark - timings.get("teacher", 0.0)
    timings["rest"] = time.perf_counter() - started
    return timings


def main() -> None:
    parser = batch_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="auto", help="auto, fp32, bf16 or bf16-autocast")
    parser.add_argument("--name", default="step_time", help="results file stem")
    parser.add_argument("--results-dir", default=str(RESULTS))
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        grpo, _ = build("grpo", args, Path(tmp))
        lopd, setup = build("lopd", args, Path(tmp))
        started = time.perf_counter()
        trajs = grpo.rt.rollout(grpo.sample_tasks(0), 0)
        generate = time.perf_counter() - started
        lopd.rt.update_bank(trajs, 0)
        hardware = describe_hardware(lopd, args.threads)
        samples: dict[tuple[str, bool], list[dict]] = {}
        for _ in range(args.repeats):
            for share in (True, False):
                for name, trainer in (("grpo", grpo), ("lopd", lopd)):
                    samples.setdefault((name, share), []).append(
                        time_rest_of_step(trainer, trajs, share))
    runs = {key: summarise(values, generate) for key, values in samples.items()}
    ratios = {share: step_ratios(runs[("lopd", share)], runs[("grpo", share)])
              for share in (True, False)}
    result = {"args": vars(args), "hardware": hardware, "generate_seconds": round(generate, 2),
              "lopd_setup_seconds": round(setup, 1),
              "action_tokens": sum(sum(t.action_mask) for t in trajs),
              "tokens": sum(len(t.input_ids) for t in trajs),
              "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
              "peak_rss_gb_process": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
              "runs": [{"method": m, "share_prefix": sh, **r} for (m, sh), r in runs.items()],
              "lopd_over_grpo": {("shared" if sh else "plain"): r for sh, r in ratios.items()}}
    if torch.cuda.is_available():
        result["peak_gpu_memory_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    out = Path(args.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(result, indent=2))
    (out / f"{args.name}.md").write_text(report(args, result, runs, ratios))
    print(json.dumps(result, indent=2))


def describe_hardware(trainer: Trainer, threads: int) -> str:
    """Where the timed work ran, e.g. "NVIDIA H200, bf16-autocast" or "CPU, 2 threads, fp32"."""
    device, dtype = trainer.rt.device, trainer.rt.dtype
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, {dtype}"
    return f"CPU, {threads} threads, {dtype}"


def summarise(values: list[dict], generate: float) -> dict:
    median = {k: statistics.median(v.get(k, 0.0) for v in values) for k in PARTS + ["rest"]}
    return {"times": {"generate": generate, **median, "total": generate + median["rest"]},
            "rest_seconds_each": [round(v["rest"], 2) for v in values]}


def step_ratios(lopd: dict, grpo: dict) -> dict:
    return {"step": round(lopd["times"]["total"] / grpo["times"]["total"], 3),
            "excluding_generation": round(lopd["times"]["rest"] / grpo["times"]["rest"], 3)}


def report(args, result: dict, runs: dict, ratios: dict) -> str:
    keys = ["generate", "compose", "teacher", "update", "total"]
    rows = [f"| {method.upper()} | {'yes' if share else 'no'} | " + " | ".join(
        f"{r['times'][k]:.1f}" for k in keys) + f" | {r['rest_seconds_each']} |"
        for (method, share), r in sorted(runs.items(), key=lambda kv: (not kv[0][1], kv[0][0]))]
    command = "`.venv/bin/python benchmarks/bench_step.py " + " ".join(
        f"--{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in vars(args).items()
        if k != "results_dir") + "`"
    lines = ["# Step time: LOPD vs GRPO on the same batch", "", command, "",
             (f"{args.tasks} tasks x {args.group} rollouts, up to {args.max_steps} turns of "
              f"{args.max_new_tokens} tokens ({result['tokens']} tokens, "
              f"{result['action_tokens']} sampled), micro-batch {args.micro_batch}, "
              f"{result['hardware']}; load average "
              f"{result['load_average'][0]} at start, {result['load_average'][1]} at end. "
              f"Generation is run once and shared; the rest of the step is the median of "
              f"{args.repeats} interleaved repeats. `shared prefix` = optim.share_prefix: each "
              "distinct [prompt ; context] of a micro-batch runs once in the student and "
              "teacher re-scoring forwards."), "",
             ("| method | shared prefix | generate s | compose s | teacher s | update s | step s "
             "| rest of step, each repeat (s) |"), "|---|---|---|---|---|---|---|---|", *rows, ""]
    for share, r in ratios.items():
        lines.append(f"LOPD / GRPO step time, shared prefix {'on' if share else 'off'}: "
                     f"**{r['step']:.2f}x** (target <= 1.25x); excluding generation "
                     f"{r['excluding_generation']:.2f}x.")
    lines += ["", (f"LOPD setup (bank seeding + cold start, once per run, not in the step): "
              f"{result['lopd_setup_seconds']} s."), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
