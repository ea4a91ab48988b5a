"""Learning sweep: which settings make the agent better on held-out ToolWorld, at what budget.

Each *variant* is a named set of config overrides on top of one shared setting (the SmolLM2
preset from the `lopd sft` warm start, 8 tasks x 4 rollouts a step from one domain, 6 turns
of at most 96 tokens). A run trains one variant on one seed, then evaluates its student
greedily on held-out `toolworld-test` (all 200 tasks by default); the warm start itself is
evaluated once, as step 0. Every comparison is paired on the same tasks: the report prints
each run's success with its standard error and its gain over the warm start with the paired
standard error.

    .venv/bin/python -m benchmarks.learning run --variants grpo-lr5e-4,grpo-lr1e-3 --seeds 0
    .venv/bin/python -m benchmarks.learning run --variants ... --parallel 2   # 1 thread each
    .venv/bin/python -m benchmarks.learning run --variants ""   # the warm start's evaluation only
    .venv/bin/python -m benchmarks.learning report

Runs start from the warm start kept in `benchmarks/results/learning/warm-start-adapter/`
(`--init-adapter` to use another).

Resumable: runs live under `runs/learning/NAME-sSEED-wFINGERPRINT` (a killed run continues
from its last checkpoint, a finished one is skipped; `benchmarks.experiments.runner`), and a
run whose summary is already committed (same settings, same warm start) is not run again. As each run ends
its summary (per-step train reward, held-out success per task, timing, the CPU) is written to
`benchmarks/results/learning/NAME-sSEED-wFINGERPRINT.json` and the report
`benchmarks/results/learning.md` (+ `learning.png`) is rewritten, so results can be committed
run by run. Checkpoints are kept every `--checkpoint-every` steps for held-out points along the
curve (`curve`).

The warm start is rebuilt wherever `lopd sft` runs, and two machines do not build the same
adapter (fp32 here, bf16 there). Each summary therefore records the fingerprint of the warm
start it began from (the adapter weights' SHA-256, first 12 hex digits), and a run is compared
only with the warm start's own evaluation for that fingerprint; summaries written before
fingerprints existed count as fingerprint "unknown" and are paired among themselves.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.experiments import runner
from benchmarks.experiments.plan import Job, identity_overrides
from benchmarks.experiments.scales import CONFIGS, REPO
from lopd.evaluate import paired_gain as paired
from lopd.evaluate import standard_error

RESULTS = REPO / "benchmarks" / "results"
OUT = RESULTS / "learning"
RUNS = REPO / "runs" / "learning"
BASE = str(CONFIGS / "toolworld-smollm2.yaml")
WARM = "warm-start"
WARM_ADAPTER = OUT / "warm-start-adapter"
"""The warm start every run begins from by default, kept in the repository (its README)."""

SHARED = ("optim.tasks_per_step=8", "optim.group_size=4", "optim.one_domain_batches=true",
          "optim.micro_batch=4", "rollout.max_steps=6", "rollout.max_new_tokens=96",
          "rollout.temperature=1.0", "data.eval_tasks=1", "run.tensorboard=false",
          "run.eval_every=0")
"""Every run of the sweep: the throughput issue's fastest step (benchmarks/results/throughput.md)."""

VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "grpo-lr2e-4": ("GRPO, LoRA lr 2e-4", ("method.name=grpo", "optim.student_lr=2e-4")),
    "grpo-lr5e-4": ("GRPO, LoRA lr 5e-4", ("method.name=grpo", "optim.student_lr=5e-4")),
    "grpo-lr1e-3": ("GRPO, LoRA lr 1e-3", ("method.name=grpo", "optim.student_lr=1e-3")),
    "grpo-lr2e-3": ("GRPO, LoRA lr 2e-3", ("method.name=grpo", "optim.student_lr=2e-3")),
    "grpo-lr1e-3-tier2": ("GRPO, LoRA lr 1e-3, training tasks of tiers 1-2",
                          ("method.name=grpo", "optim.student_lr=1e-3", "data.train_max_tier=2")),
    "grpo-lr2e-3-tier2": ("GRPO, LoRA lr 2e-3, training tasks of tiers 1-2",
                          ("method.name=grpo", "optim.student_lr=2e-3", "data.train_max_tier=2")),
    "grpo-lr1e-3-t0.7": ("GRPO, LoRA lr 1e-3, temperature 0.7",
                         ("method.name=grpo", "optim.student_lr=1e-3", "rollout.temperature=0.7")),
    "grpo-lr1e-3-tier1-g8": (
        "GRPO, LoRA lr 1e-3, tier-1 training tasks, 4 tasks x 8 rollouts, 3 training turns",
        ("method.name=grpo", "optim.student_lr=1e-3", "data.train_max_tier=1",
         "optim.tasks_per_step=4", "optim.group_size=8", "optim.micro_batch=8",
         "rollout.train_max_steps=3")),
    "grpo-lr5e-4-t0.7-tier1-g8": (
        ("GRPO, LoRA lr 5e-4, temperature 0.7, tier-1 training tasks, 4 tasks x 8 rollouts, "
         "3 training turns"),
        ("method.name=grpo", "optim.student_lr=5e-4", "rollout.temperature=0.7",
         "data.train_max_tier=1", "optim.tasks_per_step=4", "optim.group_size=8",
         "optim.micro_batch=8", "rollout.train_max_steps=3")),
    "lopd-lr1e-3-tier1-g8": (
        "LOPD, LoRA lr 1e-3, tier-1 training tasks, 4 tasks x 8 rollouts, 3 training turns",
        ("method.name=lopd", "optim.student_lr=1e-3", "data.train_max_tier=1",
         "optim.tasks_per_step=4", "optim.group_size=8", "optim.micro_batch=4",
         "rollout.train_max_steps=3")),
    "skill-sd-lr1e-3-tier1-g8": (
        "Skill-SD, LoRA lr 1e-3, tier-1 training tasks, 4 tasks x 8 rollouts, 3 training turns",
        ("method.name=skill-sd", "optim.student_lr=1e-3", "data.train_max_tier=1",
         "optim.tasks_per_step=4", "optim.group_size=8", "optim.micro_batch=4",
         "rollout.train_max_steps=3")),
    "lopd-lr5e-4-t0.7-tier1-g8": (
        ("LOPD, LoRA lr 5e-4, temperature 0.7, tier-1 training tasks, 4 tasks x 8 rollouts, "
         "3 training turns"),
        ("method.name=lopd", "optim.student_lr=5e-4", "rollout.temperature=0.7",
         "data.train_max_tier=1", "optim.tasks_per_step=4", "optim.group_size=8",
         "optim.micro_batch=4", "rollout.train_max_steps=3")),
    "skill-sd-lr5e-4-t0.7-tier1-g8": (
        ("Skill-SD, LoRA lr 5e-4, temperature 0.7, tier-1 training tasks, 4 tasks x 8 "
         "rollouts, 3 training turns"),
        ("method.name=skill-sd", "optim.student_lr=5e-4", "rollout.temperature=0.7",
         "data.train_max_tier=1", "optim.tasks_per_step=4", "optim.group_size=8",
         "optim.micro_batch=4", "rollout.train_max_steps=3")),
    "lopd-lr1e-3": ("LOPD, LoRA lr 1e-3", ("method.name=lopd", "optim.student_lr=1e-3",
                                           "optim.micro_batch=2")),
    "skill-sd-lr1e-3": ("Skill-SD, LoRA lr 1e-3", ("method.name=skill-sd",
                                                   "optim.student_lr=1e-3")),
}
"""name -> (label, overrides). Add a variant here to sweep it; the report keeps every run."""

_lock = threading.Lock()


def job(name: str, seed: int, steps: int, args: argparse.Namespace, threads: int) -> Job:
    """The run of variant ``name`` on ``seed`` (``WARM``: the warm start, evaluated only)."""
    extra = ("method.name=grpo",) if name == WARM else VARIANTS[name][1]
    warm = adapter_fingerprint(args.init_adapter)
    run_dir = (Path(args.runs) / f"{name}-s{seed}-w{warm}").resolve()
    # the warm start trains no step: its identity must not depend on the checkpoint settings
    keep = [] if name == WARM else [f"run.checkpoint_every={args.checkpoint_every}",
                                    "run.keep_checkpoints=100"]
    overrides = [*SHARED, f"model.init_adapter={args.init_adapter}", f"run.seed={seed}",
                 f"optim.steps={0 if name == WARM else steps}", f"run.threads={threads}",
                 *keep, *extra, *args.set, f"run.out_dir={run_dir}"]
    evals = {"toolworld-test": args.eval_tasks or None}
    return Job(f"learning/{name}-s{seed}", name, _method(extra),
               seed, str(run_dir), BASE, overrides, evals, False,
               str((Path(args.runs) / "_coldstart").resolve()), eval_batch=args.eval_batch)


def adapter_fingerprint(directory: str) -> str:
    """First 12 hex digits of the SHA-256 of a PEFT adapter's weights; "none" without one."""
    if not directory:
        return "none"
    weights = Path(directory) / "adapter_model.safetensors"
    if not weights.exists():
        return "missing"
    return hashlib.sha256(weights.read_bytes()).hexdigest()[:12]


def _warm_start(job: Job) -> str:
    """The fingerprint of the warm start ``job`` trains from (its ``model.init_adapter``)."""
    adapter = next((o.split("=", 1)[1] for o in job.overrides
                    if o.startswith("model.init_adapter=")), "")
    return adapter_fingerprint(adapter)


def fingerprint_of(summary: dict) -> str:
    return summary.get("warm_start", "unknown")


def warm_starts(summaries: list[dict]) -> dict[str, dict]:
    """The warm start's evaluation for each fingerprint."""
    return {fingerprint_of(s): s for s in summaries if s["name"] == WARM}


def _method(overrides: tuple[str, ...]) -> str:
    return next((o.split("=", 1)[1] for o in overrides if o.startswith("method.name=")), "lopd")


def summary(job: Job, result: dict, cpu: str) -> dict:
    """What the report needs from a finished run (the run directory is not committed)."""
    held = result["eval"]["toolworld-test"]
    steps = [{k: r[k] for k in ("step", "rollouts", "reward", "time/total") if k in r}
             for r in result["metrics"]]
    return {
        "name": job.name, "seed": job.seed, "method": job.method,
        "label": VARIANTS[job.name][0] if job.name in VARIANTS else "warm start (no training)",
        "overrides": [o for o in job.overrides if not o.startswith("run.out_dir=")],
        "rollouts": steps[-1]["rollouts"] if steps else 0, "steps": steps,
        "heldout": {k: held[k] for k in ("n", "success", "reward", "per_task", "seconds")
                    if k in held},
        "run_dir": str(Path(job.run_dir).relative_to(REPO)) if Path(job.run_dir).is_relative_to(REPO)
        else job.run_dir,
        "timing": result["timing"], "peak_rss_mb": result["peak_rss_mb"], "cpu": cpu,
        "finished": result["finished"], "warm_start": _warm_start(job),
    }


def summary_path(job: Job) -> Path:
    """Where ``job``'s summary lives in the results directory."""
    return OUT / f"{job.name}-s{job.seed}-w{_warm_start(job)}.json"


def committed(job: Job) -> bool:
    """True when the results directory already holds this run's summary (the same settings,
    the same warm start): a fresh checkout has no run directories, and the run need not be
    repeated."""
    path = summary_path(job)
    if not path.exists():
        return False
    return (identity_overrides(json.loads(path.read_text())["overrides"])
            == identity_overrides(job.overrides))


def run_job(job: Job, cpu: str, isolate: bool) -> None:
    """Train + evaluate (resuming), then write its summary and the report; a run whose
    summary is already committed is skipped."""
    if committed(job):
        print(f"[learning] {job.key}: summary already in {OUT}, skipped", flush=True)
        return
    if runner.load_result(job) is None:
        print(f"[learning] {job.key} -> {job.run_dir}", flush=True)
        started = time.perf_counter()
        runner.run_isolated(job) if isolate else runner.run_one(job)
        print(f"[learning] {job.key} done in {time.perf_counter() - started:.0f} s", flush=True)
    result = runner.load_result(job)
    with _lock:
        OUT.mkdir(parents=True, exist_ok=True)
        path = summary_path(job)
        path.write_text(json.dumps(summary(job, result, cpu), indent=1) + "\n")
        write_report()


def curve_points(summary_path: Path, threads: int, eval_batch: int,
                 steps: set[int] | None = None) -> int:
    """Evaluate a finished run's kept checkpoints (all but the last, whose held-out result is
    the run's own; only ``steps`` if given) on the same held-out tasks; add them to its
    summary as ``curve``. Returns the number of new points. Resumable: points already in the
    summary are kept."""
    from lopd.checkpoint import list_checkpoints
    from lopd.evaluate import EvalSpec, run_eval

    data = json.loads(summary_path.read_text())
    run_dir = REPO / data["run_dir"]
    done = {point["step"] for point in data.get("curve", [])}
    config = dict(o.split("=", 1) for o in data["overrides"])
    per_step = int(config["optim.tasks_per_step"]) * int(config["optim.group_size"])
    added = 0
    for checkpoint in list_checkpoints(run_dir)[:-1]:
        step = int(checkpoint.name.removeprefix("step-"))
        if step in done or (steps and step not in steps):
            continue
        spec = EvalSpec(model=config.get("model.name", "smollm2-135m"), suites=["toolworld-test"],
                        limit=data["heldout"]["n"], out_dir=str(checkpoint / "heldout"),
                        adapter=str(checkpoint / "student"),
                        init_adapter=config.get("model.init_adapter", ""), threads=threads,
                        dtype=config.get("model.dtype", "auto"),
                        max_new_tokens=int(config["rollout.max_new_tokens"]),
                        max_steps=int(config["rollout.max_steps"]), batch_size=eval_batch)
        held = run_eval(spec)["toolworld-test"]
        data.setdefault("curve", []).append({
            "step": step, "rollouts": step * per_step, "n": held["n"],
            "success": held["success"], "per_task": held["per_task"]})
        data["curve"].sort(key=lambda point: point["step"])
        summary_path.write_text(json.dumps(data, indent=1) + "\n")
        added += 1
    return added


def load_summaries() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(OUT.glob("*.json"))]


def _se(point: dict) -> float:
    """Standard error of a held-out point's success rate, from its per-task successes."""
    return standard_error(list(point["per_task"].values()))


def pooled(runs: list[dict]) -> dict[str, float]:
    """Per-task success averaged over a variant's seeds (the unit of its paired comparison)."""
    tasks: dict[str, list[float]] = {}
    for run in runs:
        for task, value in run["heldout"]["per_task"].items():
            tasks.setdefault(task, []).append(value)
    return {t: sum(v) / len(v) for t, v in tasks.items()}


def report_lines(summaries: list[dict]) -> list[str]:
    warms = warm_starts(summaries)
    lines = [("| variant | seed | rollouts | held-out success (n) +- SE | gain over warm start +- "
             "paired SE | train reward, last 5 steps | train s | eval s |"), "|" + "---|" * 8]
    variants: dict[tuple[str, str], list[dict]] = {}
    for s in summaries:
        variants.setdefault((s["name"], fingerprint_of(s)), []).append(s)
    for (name, fingerprint), runs in variants.items():
        warm = warms.get(fingerprint)
        base = warm["heldout"]["per_task"] if warm else {}
        for run in runs:
            h = run["heldout"]
            gain = "-" if name == WARM or not base else "{:+.3f} +- {:.3f}".format(
                *paired(h["per_task"], base)[:2])
            tail = [r["reward"] for r in run["steps"][-5:]]
            lines.append(
                f"| {run['label']} [w {fingerprint}] | {run['seed']} | {run['rollouts']} | "
                f"{h['success']:.3f} "
                f"({h['n']}) +- {_se(h):.3f} | {gain} | "
                f"{(sum(tail) / len(tail)) if tail else float('nan'):.3f} | "
                f"{run['timing'].get('train_s', 0):.0f} | {h.get('seconds', 0):.0f} |")
        if len(runs) > 1 and name != WARM and base:
            per_task = pooled(runs)
            mean = sum(per_task.values()) / len(per_task)
            gain, se, n = paired(per_task, base)
            lines.append(f"| **{runs[0]['label']}, mean of {len(runs)} seeds** | - | "
                         f"{runs[0]['rollouts']} | {mean:.3f} ({n}) | {gain:+.3f} +- {se:.3f} "
                         f"| - | - | - |")
    return lines


def heldout_points(run: dict, warm: dict | None) -> list[dict]:
    """Held-out points of a run along its budget: the warm start (0 rollouts), the evaluated
    checkpoints (``curve``), and the end."""
    points = [{"rollouts": 0, **warm["heldout"]}] if warm else []
    points += run.get("curve", [])
    return points + [{"rollouts": run["rollouts"], **run["heldout"]}]


def curve_lines(summaries: list[dict]) -> list[str]:
    """One row per run with intermediate held-out points: success (gain +- paired SE)."""
    warms = warm_starts(summaries)
    rows = [s for s in summaries if s.get("curve") and fingerprint_of(s) in warms]
    if not rows:
        return []
    lines = [("Held-out success along the budget (rollouts: success, gain over the warm start "
             "+- paired SE):"), "", "| variant | seed | points |", "|---|---|---|"]
    for run in rows:
        warm = warms[fingerprint_of(run)]
        base = warm["heldout"]["per_task"]
        cells = []
        for point in heldout_points(run, warm)[1:]:
            gain, se, _ = paired(point["per_task"], base)
            cells.append(f"{point['rollouts']}: {point['success']:.3f} ({gain:+.3f} +- {se:.3f})")
        lines.append(f"| {run['label']} | {run['seed']} | {'; '.join(cells)} |")
    return [*lines, ""]


def test_tiers() -> dict[str, int]:
    """Held-out task id -> difficulty tier (tool calls in the reference solution)."""
    from lopd.envs.toolworld.tasks import load_tasks

    return {task.id: int(task.metadata["tier"]) for task in load_tasks("test")}


def tier_lines(summaries: list[dict]) -> list[str]:
    """Held-out success per difficulty tier for every run: where a gain comes from."""
    tiers = test_tiers()
    wanted = sorted(set(tiers.values()))
    lines = ["Held-out success by tier (tasks in the tier):", "",
             "| variant | seed | " + " | ".join(
                 f"tier {t} ({sum(v == t for v in tiers.values())})" for t in wanted) + " |",
             "|" + "---|" * (2 + len(wanted))]
    for run in summaries:
        by_tier: dict[int, list[float]] = {}
        for task, value in run["heldout"]["per_task"].items():
            if task in tiers:
                by_tier.setdefault(tiers[task], []).append(value)
        cells = [f"{sum(by_tier[t]) / len(by_tier[t]):.3f}" if by_tier.get(t) else "-"
                 for t in wanted]
        lines.append(f"| {run['label']} [w {fingerprint_of(run)}] | {run['seed']} | "
                     + " | ".join(cells) + " |")
    return [*lines, ""]


def write_report() -> Path:
    summaries = load_summaries()
    cpus = sorted({s["cpu"] for s in summaries})
    text = ["# Learning sweep: held-out ToolWorld success against the warm start", "",
            ("Written by `python -m benchmarks.learning` (see its docstring); one JSON per run in "
            "`benchmarks/results/learning/`. Held-out: greedy, `toolworld-test`, 6 turns of at "
            "most 96 tokens. SE: the standard error of a success rate over its tasks; the gain "
            "is paired (the same tasks before and after) and its SE is that of the per-task "
            "differences."), "", "Shared settings: `" + " ".join(SHARED) + "`.", "",
            *report_lines(summaries), "", *curve_lines(summaries), *tier_lines(summaries),
            "![learning curves](learning.png)", "", "CPU: " + " | ".join(cpus), ""]
    path = RESULTS / "learning.md"
    path.write_text("\n".join(text))
    plot(summaries, RESULTS / "learning.png")
    return path


def plot(summaries: list[dict], png: Path) -> None:
    """Train reward per step (moving mean of 5) and the held-out end points, per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (train, held) = plt.subplots(1, 2, figsize=(11, 4))
    warms = warm_starts(summaries)
    for s in summaries:
        warm = warms.get(fingerprint_of(s))
        if not s["steps"]:
            continue
        x = [r["rollouts"] for r in s["steps"]]
        y = [r["reward"] for r in s["steps"]]
        smooth = [sum(y[max(0, i - 4):i + 1]) / len(y[max(0, i - 4):i + 1]) for i in range(len(y))]
        train.plot(x, smooth, label=f"{s['name']} s{s['seed']}")
        points = heldout_points(s, warm)
        held.errorbar([p["rollouts"] for p in points], [p["success"] for p in points],
                      yerr=[_se(p) for p in points], marker="o",
                      capsize=3, label=f"{s['name']} s{s['seed']}")
    for fingerprint, warm in warms.items():
        held.axhline(warm["heldout"]["success"], color="gray", ls="--",
                     label=f"warm start [w {fingerprint}]")
    train.set(xlabel="rollouts", ylabel="train reward (moving mean of 5 steps)")
    held.set(xlabel="rollouts", ylabel="held-out success (+- SE)")
    for ax in (train, held):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.learning", description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["run", "curve", "report", "list"],
                   help="run: train + evaluate; curve: evaluate finished runs' kept checkpoints; "
                        "report: rewrite learning.md/png; list: the variants")
    p.add_argument("--variants", default="grpo-lr1e-3", help="comma-separated (see `list`)")
    p.add_argument("--seeds", default="0", help="comma-separated training seeds")
    p.add_argument("--steps", type=int, default=24, help="training steps (32 rollouts each)")
    p.add_argument("--eval-tasks", type=int, default=0, help="held-out tasks (0 = all 200)")
    p.add_argument("--init-adapter", default=str(WARM_ADAPTER.relative_to(REPO)),
                   help="the warm start (default: the one kept in the repository)")
    p.add_argument("--runs", default=str(RUNS), help="run directories root")
    p.add_argument("--checkpoint-every", type=int, default=8)
    p.add_argument("--eval-batch", type=int, default=100, help="held-out episodes generated together")
    p.add_argument("--at", default="", help="curve: only these checkpoint steps (comma-separated)")
    p.add_argument("--parallel", type=int, default=1,
                   help="runs at once, each in its own process with 2/N threads (the warm "
                        "start's evaluation runs first, alone, with 2)")
    p.add_argument("--set", action="append", default=[], metavar="section.field=value",
                   help="override for every run (repeatable; changes the runs' identity)")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=True,
                   help="each run in a fresh Python process (clean peak memory)")
    args = p.parse_args(argv)
    if args.command == "list":
        print("\n".join(f"{k}: {label}  [{' '.join(o)}]" for k, (label, o) in VARIANTS.items()))
        return 0
    if args.command == "report":
        print(write_report())
        return 0
    if args.command == "curve":
        wanted = set(args.variants.split(","))
        at = {int(step) for step in args.at.split(",") if step}
        for path in sorted(OUT.glob("*.json")):
            if json.loads(path.read_text())["name"] in wanted:
                print(f"[learning] {path.stem}: {curve_points(path, 2, args.eval_batch, at)} new points")
                with _lock:
                    write_report()
        return 0
    threads = max(1, 2 // args.parallel)
    names = [WARM, *(n for n in args.variants.split(",") if n)]  # "": the warm start only
    unknown = [n for n in names[1:] if n not in VARIANTS]
    if unknown:
        p.error(f"unknown variants {unknown}; see `list`")
    seeds = [int(s) for s in args.seeds.split(",")]
    jobs = [job(WARM, 0, 0, args, 2)] + [job(n, s, args.steps, args, threads)
                                         for n in names[1:] for s in seeds]
    from benchmarks.bench_throughput import cpu_line

    cpu = cpu_line()
    print(f"[learning] {len(jobs)} runs; command: {shlex.join([sys.executable, '-m', 'benchmarks.learning', *(argv or sys.argv[1:])])}")
    run_job(jobs[0], cpu, args.isolate)
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        for future in [pool.submit(run_job, j, cpu, args.isolate) for j in jobs[1:]]:
            future.result()
    print(write_report())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
