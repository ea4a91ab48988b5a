"""Does the demo's learner gain beyond 2 standard errors on every seed? The demo's setting
(``lopd.demo.demo_config``) trained from the committed warm start, one seed per call, with the
held-out success measured on the tier-1 test split (``toolworld-test-tier1``, 200 tasks of the
tier the demo trains on) after chosen numbers of steps, and paired against the warm start on
the same tasks.

    .venv/bin/python -m benchmarks.studies.demo_seeds run --seed 0 --name mixed \\
        --set optim.one_domain_batches=false
    .venv/bin/python -m benchmarks.studies.demo_seeds report

Each call trains in its own process (the engine and the model hold ~14 GB), writes
``benchmarks/results/studies/demo_seeds/<name>-s<seed>.json`` when it ends and skips a
(name, seed) already there; the warm start's evaluation is computed once and kept beside them.
``report`` writes ``demo_seeds.md``: gain +- paired SE at each point, with each run's CPU line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

from benchmarks.bench_throughput import cpu_line
from lopd.config import apply, parse_overrides, validate
from lopd.evaluate import paired_gain

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "benchmarks" / "results" / "studies" / "demo_seeds"
SUITE = "toolworld-test-tier1"


def study_config(run_dir: Path, seed: int, steps: int, eval_tasks: int, overrides: list[str]):
    from lopd.demo import WARM_START, demo_config

    config = demo_config(run_dir, quick=False, steps=steps)
    config.model.init_adapter = str(WARM_START)
    config.run.seed = seed
    config.run.tensorboard = False
    config.data.eval_suite = SUITE
    config.data.eval_tasks = eval_tasks
    config.data.eval_max_tier = 0
    return validate(apply(config, parse_overrides(overrides)))


def run(args: argparse.Namespace) -> None:
    from lopd.trainer import Trainer

    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{args.name}-s{args.seed}.json"
    if path.exists():
        print(f"{path} exists; skipping")
        return
    stops = sorted(int(s) for s in args.eval_at.split(","))
    config = study_config(REPO / "runs" / "demo-seeds" / f"{args.name}-s{args.seed}", args.seed,
                          stops[-1], args.eval_tasks, args.set)
    started = time.time()
    trainer = Trainer(config)
    numerics = f"{config.model.dtype}-{os.environ.get('ATEN_CPU_CAPABILITY', 'default')}"
    warm_path = OUT / f"warm-start-{args.eval_tasks}-{numerics}.json"  # greedy: one per numerics
    eval_s = 0.0
    if not warm_path.exists():
        t0 = time.time()
        warm = trainer.evaluate()
        eval_s += time.time() - t0
        warm_path.write_text(json.dumps({"suite": SUITE, "success": warm["success"],
                                         "per_task": warm["per_task"], "cpu": cpu_line()}, indent=1))
    warm = json.loads(warm_path.read_text())
    points, train_s = [], 0.0
    for stop in stops:
        config.optim.steps = stop
        t0 = time.time()
        trainer.fit()
        train_s += time.time() - t0
        t0 = time.time()
        result = trainer.evaluate()
        eval_s += time.time() - t0
        gain, se, _ = paired_gain(result["per_task"], warm["per_task"])
        changed = sum(result["per_task"][t] != warm["per_task"][t] for t in warm["per_task"])
        rollouts = stop * config.optim.tasks_per_step * config.optim.group_size
        print(f"step {stop} ({rollouts} rollouts): "
              f"success {result['success']:.3f}, paired gain {gain:+.3f} +- {se:.3f} ({changed} changed)")
        points.append({"steps": stop, "rollouts": rollouts,
                       "success": result["success"], "gain": gain, "gain_se": se, "changed": changed,
                       "per_task": result["per_task"]})
    path.write_text(json.dumps({
        "name": args.name, "seed": args.seed, "overrides": args.set, "suite": SUITE,
        "eval_tasks": args.eval_tasks, "warm_start": warm_path.name, "warm_start_success": warm["success"], "points": points,
        "timing": {"train_s": round(train_s, 1), "eval_s": round(eval_s, 1),
                   "wall_s": round(time.time() - started, 1)},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "cpu": cpu_line(),
    }, indent=1))
    print(f"wrote {path}")


def report(_: argparse.Namespace) -> None:
    runs = [json.loads(p.read_text()) for p in sorted(OUT.glob("*-s*.json"))
            if not p.name.startswith("warm-start")]
    lines = ["# The demo's learner over seeds", "",
             ("`python -m benchmarks.studies.demo_seeds` (module docstring): the demo's GRPO "
              "setting (16 steps of 4 tier-1 tasks x 8 rollouts, LoRA lr 5e-4, temperature 0.7) "
              "from the committed warm start, held-out greedy success on the tier-1 test split "
              f"(`{SUITE}`, 3 turns x 64 tokens), paired against the warm start evaluated with "
              "the same numerics on the same tasks. `train s` covers every step a run took "
              "(24 for mixed seed 0, else 16); each run's JSON holds its per-task results."), "",
             "| setting | seed | warm start | rollouts | success | paired gain +- SE (changed) | gain / SE |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        for p in r["points"]:
            ratio = p["gain"] / p["gain_se"] if p["gain_se"] else float("nan")
            lines.append(f"| {r['name']} (`{' '.join(r['overrides']) or 'demo defaults'}`) | {r['seed']} | "
                         f"{r['warm_start_success']:.3f} | {p['rollouts']} | {p['success']:.3f} | "
                         f"{p['gain']:+.3f} +- {p['gain_se']:.3f} ({p['changed']}) | {ratio:.1f} |")
    lines += ["", "| setting | seed | train s | eval s | peak RSS MB | CPU |", "|---|---|---|---|---|---|"]
    for r in runs:
        t = r["timing"]
        lines.append(f"| {r['name']} | {r['seed']} | {t['train_s']:.0f} | {t['eval_s']:.0f} | "
                     f"{r['peak_rss_mb']:.0f} | {r['cpu']} |")
    (OUT.parent / "demo_seeds.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["run", "report"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default="demo")
    p.add_argument("--eval-at", default="16,24", help="steps after which to evaluate")
    p.add_argument("--eval-tasks", type=int, default=200)
    p.add_argument("--set", action="append", default=[], metavar="section.field=value")
    args = p.parse_args()
    run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    main()
