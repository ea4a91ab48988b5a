"""The update phase of one real training step under two settings, interleaved, from the same weights.

One step of the learning sweep's setting (``benchmarks.learning`` variant, its warm start, its
seed) is rolled out once; then the rest of the step -- privileged context, teacher re-scoring,
losses, backward -- runs ``--repeats`` times per setting, alternating A B, B A, ... The
optimiser step is skipped, so every repeat starts from the same weights: the loss terms and the
gradients of the two settings must agree (an exact lever changes the time, not the numbers),
and the report says by how much they differ. It also counts, for each setting, the tokens the
re-scoring forwards run after the shared prompt (padding included) against the real ones.

LOPD's bank and cold-started composer can be copied from an existing run directory
(``--from-run``) instead of being built again.

    .venv/bin/python -m benchmarks.bench_update --variant lopd-lr5e-4-t0.7-tier1-g8 \\
        --from-run runs/learning/lopd-lr5e-4-t0.7-tier1-g8-s0-w890b506a3967 \\
        --baseline optim.length_sorted=false --after optim.length_sorted=true --name update_order

Writes ``benchmarks/results/NAME.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.bench_step import time_rest_of_step
from benchmarks.bench_throughput import cpu_line
from benchmarks.learning import BASE, SHARED, VARIANTS, WARM_ADAPTER
from lopd.batch import forwarded_length
from lopd.config import apply, load_config, parse_overrides
from lopd.trainer import Trainer, grpo_advantages, micro_batches

RESULTS = Path(__file__).parent / "results"
COPIED = ("composer_phi0", "coldstart.json", "bank.sqlite")


def build(args, out: Path) -> Trainer:
    """The variant's trainer on ``out`` (LOPD's bank and phi_0 copied from ``--from-run``)."""
    overrides = [*SHARED, *VARIANTS[args.variant][1], f"model.init_adapter={args.adapter}",
                 f"run.seed={args.seed}", f"run.threads={args.threads}", *args.set,
                 f"run.out_dir={out}"]
    if args.from_run:
        out.mkdir(parents=True)
        for name in COPIED:
            source = Path(args.from_run) / name
            (shutil.copytree if source.is_dir() else shutil.copy2)(source, out / name)
    return Trainer(load_config(BASE, overrides))


def command_line(module: str, args: argparse.Namespace) -> str:
    """The ``python -m`` command that repeats this run (every option but ``--results-dir``)."""
    options = (f"--{k.replace('_', '-')} {shlex.quote(' '.join(v) if isinstance(v, list) else str(v))}"
               for k, v in vars(args).items() if k != "results_dir")
    return f"python -m {module} " + " ".join(options)


def forwarded_tokens(trainer: Trainer, trajs, active: torch.Tensor) -> dict:
    """Tokens after each row's prompt that the micro-batches forward (padded) and hold (real)."""
    optim = trainer.config.optim
    advantages = grpo_advantages(trajs) if trainer.config.method.name == "grpo" else None
    padded = real = 0
    for rows in micro_batches(trajs, active, advantages, optim):
        tails = [forwarded_length(trajs[r], optim.trim_after_last_action) - trajs[r].prompt_len
                 for r in rows]
        padded += len(tails) * max(tails)
        real += sum(tails)
    return {"padded": padded, "real": real, "padding_share": round(1 - real / max(padded, 1), 3)}


def measure(trainer: Trainer, trajs, settings: dict[str, list[str]], repeats: int) -> dict:
    """Alternate the settings (A B, B A, ...); each repeat's time, loss terms and gradients."""
    seen: dict = {}
    update = trainer.update

    def recording_update(trajs, context, timings):
        terms, anchor = update(trajs, context, timings)
        seen["active"] = context.active if context is not None else torch.ones(len(trajs), dtype=torch.bool)
        seen["terms"] = {"distill": terms.distill, "delta": terms.delta, "rows": terms.rows}
        return terms, anchor

    trainer.update = recording_update
    trainer.rt.optimizer_step = lambda: None  # every repeat starts from the same weights
    runs: dict[str, dict] = {name: {"seconds": [], "parts": []} for name in settings}
    order = list(settings)
    for repeat in range(repeats):
        for name in order if repeat % 2 == 0 else order[::-1]:
            apply(trainer.config, parse_overrides(settings[name]))
            timings = time_rest_of_step(trainer, trajs, share=True)
            run = runs[name]
            run["seconds"].append(round(timings["rest"], 2))
            run["parts"].append({k: round(v, 2) for k, v in timings.items()})
            run["tokens"] = forwarded_tokens(trainer, trajs, seen["active"])
            run["grads"] = [p.grad.detach().clone() for p in gradient_params(trainer)]
            run["terms"] = seen["terms"]
    return runs


def gradient_params(trainer: Trainer) -> list[torch.nn.Parameter]:
    rt = trainer.rt
    params = rt.student_parameters() + (rt.composer.trainable_parameters() if rt.composer else [])
    return [p for p in params if p.grad is not None]


def agreement(a: dict, b: dict) -> dict:
    """How far apart two settings' loss terms and gradients are (relative)."""
    worst = 0.0
    for x, y in zip(a["grads"], b["grads"], strict=True):
        worst = max(worst, float((x - y).norm() / y.norm().clamp(min=1e-30)))
    return {"distill": [a["terms"]["distill"], b["terms"]["distill"]],
            "delta": [a["terms"]["delta"], b["terms"]["delta"]],
            "rows": [a["terms"]["rows"], b["terms"]["rows"]],
            "max_relative_grad_difference": worst}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="lopd-lr5e-4-t0.7-tier1-g8", choices=sorted(VARIANTS))
    parser.add_argument("--from-run", default="", help="run directory to copy LOPD's bank and phi_0 from")
    parser.add_argument("--adapter", default=str(WARM_ADAPTER))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step", type=int, default=0, help="which step's tasks to roll out")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="repeats per setting")
    parser.add_argument("--baseline", default="optim.length_sorted=false")
    parser.add_argument("--after", default="optim.length_sorted=true")
    parser.add_argument("--set", nargs="*", default=[], help="more overrides (both settings)")
    parser.add_argument("--name", default="update_order")
    parser.add_argument("--results-dir", default=str(RESULTS))
    args = parser.parse_args(argv)
    settings = {"baseline": args.baseline.split(), "after": args.after.split()}
    with tempfile.TemporaryDirectory() as tmp:
        trainer = build(args, Path(tmp) / "run")
        started = time.perf_counter()
        trajs = trainer.rt.rollout(trainer.sample_tasks(args.step), args.step)
        generate = time.perf_counter() - started
        trainer.rt.update_bank(trajs, args.step)
        runs = measure(trainer, trajs, settings, args.repeats)
    result = {
        "command": command_line("benchmarks.bench_update", args),
        "cpu": cpu_line(), "generate_seconds": round(generate, 1), "rollouts": len(trajs),
        "tokens": sum(len(t.input_ids) for t in trajs),
        "action_tokens": sum(sum(t.action_mask) for t in trajs),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3),
        "settings": settings, "agreement": agreement(runs["after"], runs["baseline"]),
        "runs": {name: {k: v for k, v in run.items() if k != "grads"} for name, run in runs.items()},
    }
    base, after = (statistics.median(runs[n]["seconds"]) for n in ("baseline", "after"))
    result["speedup"] = round(base / after, 3)
    out = Path(args.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(result, indent=2))
    (out / f"{args.name}.md").write_text(report(args, result))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))


def report(args, result: dict) -> str:
    rows = []
    for name, run in result["runs"].items():
        tokens = run["tokens"]
        rows.append(f"| {name} | `{' '.join(result['settings'][name])}` | {run['seconds']} | "
                    f"{statistics.median(run['seconds']):.1f} | {tokens['padded']} | {tokens['real']} | "
                    f"{tokens['padding_share']:.1%} |")
    agree = result["agreement"]
    return "\n".join([
        f"# Update phase of one step: `{args.baseline}` vs `{args.after}`", "",
        f"    {result['command']}", "", f"CPU: {result['cpu']}", "",
        (f"Variant `{args.variant}`, seed {args.seed}, the tasks of step {args.step}: "
         f"{result['rollouts']} rollouts, {result['tokens']} tokens ({result['action_tokens']} "
         f"sampled), generated once in {result['generate_seconds']} s. Each setting ran the rest "
         f"of the step (context, teacher, losses, backward; no optimiser step) {args.repeats} "
         f"times, alternating. Peak RSS {result['peak_rss_mb']} MB."), "",
        "| setting | overrides | seconds each | median s | tokens after the prompt, padded | real | padding |",
        "|---|---|---|---|---|---|---|", *rows, "",
        f"Speed-up (baseline median / after median): **{result['speedup']:.2f}x**.", "",
        (f"Same numbers: distill {agree['distill'][0]:.6f} vs {agree['distill'][1]:.6f}, delta "
         f"{agree['delta'][0]:.6f} vs {agree['delta'][1]:.6f}, rows {agree['rows']}; largest "
         f"relative difference of a parameter's gradient {agree['max_relative_grad_difference']:.2e}."),
        ""])


if __name__ == "__main__":
    main()
