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
    config = apply(config, parse_overrides(overrides))
    config.run.out_dir = str(run_dir / config.method.name)  # the method an override names
    return validate(config)


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
        "student_lr": config.optim.student_lr, "tasks_per_step": config.optim.tasks_per_step,
        "eval_tasks": args.eval_tasks, "warm_start": warm_path.name, "warm_start_success": warm["success"], "points": points,
        "timing": {"train_s": round(train_s, 1), "eval_s": round(eval_s, 1),
                   "wall_s": round(time.time() - started, 1)},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "cpu": cpu_line(),
    }, indent=1))
    print(f"wrote {path}")


FORMER_DEMO_LR = 5e-4
"""The demo's LoRA lr when the runs without a recorded ``student_lr`` were made."""


def _domain(task_id: str) -> str:
    return task_id.split("-")[3]  # tw-test-tier1-<domain>-<index>


def domain_row(label: str, per_task: dict) -> str:
    """Held-out successes per domain, e.g. ``| travel 26/33 | ...``."""
    wins: dict[str, int] = {}
    total: dict[str, int] = {}
    for task_id, ok in per_task.items():
        domain = _domain(task_id)
        wins[domain] = wins.get(domain, 0) + int(ok)
        total[domain] = total.get(domain, 0) + 1
    return f"| {label} | " + " | ".join(f"{wins[d]}/{total[d]}" for d in sorted(total)) + " |"


def travel_stream(runs: list[dict]) -> list[str]:
    """Which training steps of each (seed, tasks per step) drew travel tasks, by kind: the
    held-out travel tasks are all bookings, while 91 of the 160 tier-1 travel training tasks
    cancel a booking (every cancel prompt is a training prompt, so none can be held out)."""
    from lopd.envs import task_pool
    from lopd.trainer import step_tasks

    pool = task_pool("toolworld-train", max_tier=1)
    lines = [("Travel tasks in each run's training stream (step indices from 0; "
              "`lopd.trainer.step_tasks`):"), "",
             "| seed | tasks per step | steps with a cancel_booking task | steps with a book_flight task |",
             "|---|---|---|---|"]
    for seed, tasks in sorted({(r["seed"], r.get("tasks_per_step", 4)) for r in runs}):
        steps = max(p["steps"] for r in runs for p in r["points"]
                    if (r["seed"], r.get("tasks_per_step", 4)) == (seed, tasks))
        kinds = {"cancel_booking": [], "book_flight": []}
        for step in range(steps):
            for task in step_tasks(pool, seed, step, tasks, one_domain=False):
                for kind, found in kinds.items():
                    if task.domain == "travel" and f'"{kind}"' in task.reference and step not in found:
                        found.append(step)
        lines.append(f"| {seed} | {tasks} | {kinds['cancel_booking']} | {kinds['book_flight']} |")
    return lines


def report(_: argparse.Namespace) -> None:
    runs = [json.loads(p.read_text()) for p in sorted(OUT.glob("*-s*.json"))
            if not p.name.startswith("warm-start")]
    lines = ["# The demo's learner over seeds", "",
             ("`python -m benchmarks.studies.demo_seeds` (module docstring): the demo's GRPO "
              "setting (tier-1 tasks x 8 rollouts a step, temperature 0.7, 3 training turns) "
              "from the committed warm start, held-out greedy success on the tier-1 test split "
              f"(`{SUITE}`, 3 turns x 64 tokens), paired against the warm start evaluated with "
              "the same numerics on the same tasks. `lr` is the LoRA learning rate and `tasks` "
              "the tasks per step; each run's JSON holds its per-task results."), "",
             "| setting | lr | tasks | seed | warm start | rollouts | success | paired gain +- SE (changed) | gain / SE |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lr, tasks = r.get("student_lr", FORMER_DEMO_LR), r.get("tasks_per_step", 4)
        for p in r["points"]:
            ratio = p["gain"] / p["gain_se"] if p["gain_se"] else float("nan")
            lines.append(f"| {r['name']} (`{' '.join(r['overrides']) or 'demo defaults'}`) | {lr:g} | "
                         f"{tasks} | {r['seed']} | {r['warm_start_success']:.3f} | {p['rollouts']} | "
                         f"{p['success']:.3f} | {p['gain']:+.3f} +- {p['gain_se']:.3f} ({p['changed']}) | "
                         f"{ratio:.1f} |")
    warm_files = sorted({r["warm_start"] for r in runs})
    warms = {name: json.loads((OUT / name).read_text())["per_task"] for name in warm_files}
    domains = sorted({_domain(t) for per_task in warms.values() for t in per_task})
    lines += ["", "Held-out successes by domain (each warm start, then each run after each point):", "",
              "| run @ steps | " + " | ".join(domains) + " |", "|---" * (len(domains) + 1) + "|"]
    lines += [domain_row(f"warm start ({name.removesuffix('.json')})", per_task)
              for name, per_task in warms.items()]
    lines += [domain_row(f"{r['name']} s{r['seed']} @ {p['steps']}", p["per_task"])
              for r in runs for p in r["points"]]
    lines += ["", *travel_stream(runs)]
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
    p.add_argument("--eval-at", default="8,16", help="steps after which to evaluate")
    p.add_argument("--eval-tasks", type=int, default=200)
    p.add_argument("--set", action="append", default=[], metavar="section.field=value")
    args = p.parse_args()
    run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    main()
