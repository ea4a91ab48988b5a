"""Command line: ``python -m benchmarks.experiments EXPERIMENT --scale {quick,laptop,paper}``.

Each experiment plans its runs, prints their number and the estimated wall time, trains the
ones not finished yet, writes ``OUT/<experiment>.json`` + PNG, and regenerates the report.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.experiments import plan, records, runner
from benchmarks.experiments.conclusions import write_report
from benchmarks.experiments.scales import REPO, SCALES

PYTHON = ".venv/bin/python"
_RESULT_OPTIONS = ("seeds", "steps", "ablation_steps", "model", "init_adapter", "bfcl",
                   "humaneval", "presets", "set", "out", "runs", "report", "ablation_eval")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.experiments",
                                description="The paper's experiments (section 4) at three scales.")
    p.add_argument("experiment", choices=[*plan.EXPERIMENTS, "report", "all"])
    p.add_argument("--scale", choices=list(SCALES), default="laptop")
    p.add_argument("--seeds", help="comma-separated training seeds (default: the scale's)")
    p.add_argument("--steps", type=int, help="steps of every efficiency/method-table run")
    p.add_argument("--ablation-steps", type=int, help="steps of every ablation run")
    p.add_argument("--out", help="results directory (JSON + PNG)")
    p.add_argument("--runs", help="run directories root (default runs/experiments/SCALE)")
    p.add_argument("--report", help="report path (laptop: benchmarks/results/archive/laptop-sweep.md; "
                   "else OUT/RESULTS.md)")
    p.add_argument("--init-adapter", help="warm-start adapter of the ToolWorld preset ('' = none); "
                                          "created with `lopd sft --steps 30` if missing")
    p.add_argument("--model", help="model name or HF directory (required at paper scale)")
    p.add_argument("--bfcl", type=int, help="BFCL multi-turn tasks per category in the held-out "
                                            "eval (0 = off, -1 = all)")
    p.add_argument("--humaneval", type=int, help="HumanEval problems for the code preset (0 = all)")
    p.add_argument("--presets", help="method-table presets: toolworld,code")
    p.add_argument("--ablation-eval", action="store_true", help="held-out eval after ablation runs")
    p.add_argument("--set", action="append", default=None, metavar="section.field=value",
                   help="config override applied to every run (repeatable)")
    p.add_argument("--only", help="run only these row names (methods, vanilla, ablation variants); "
                                  "finished runs of the others are still read")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                   help="one subprocess per run (default at laptop/paper scale)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    p.add_argument("--no-new-runs", action="store_true",
                   help="train nothing: only add missing held-out suites to finished runs and "
                        "rewrite the tables (unfinished runs are listed as missing)")
    return p


def _path(value: str | None, default: Path) -> Path:
    return Path(value).resolve() if value else default


def _adapter(value: str) -> str:
    """An adapter path: absolute as given; relative to the working directory if it exists
    there, else to the repository (the default ``runs/sft/adapter``)."""
    if not value:
        return ""
    path = Path(value)
    if path.is_absolute() or path.exists():
        return str(path.resolve())
    return str(REPO / path)


def settings(args: argparse.Namespace, argv: list[str]) -> plan.Settings:
    scale = SCALES[args.scale]
    out = _path(args.out, REPO / "benchmarks" / "results" / "experiments" /
                ("" if scale.name == "laptop" else scale.name))
    # the laptop sweep is archived beside benchmarks/RESULTS.md, the written report it predates
    default_report = (REPO / "benchmarks" / "results" / "archive" / "laptop-sweep.md"
                      if scale.name == "laptop" else out / "RESULTS.md")
    adapter = _adapter(scale.init_adapter if args.init_adapter is None else args.init_adapter)
    return plan.Settings(
        scale=scale, seeds=tuple(int(s) for s in args.seeds.split(",")) if args.seeds else scale.seeds,
        steps=args.steps or scale.steps, ablation_steps=args.ablation_steps or scale.ablation_steps,
        runs_root=_path(args.runs, REPO / "runs" / "experiments" / scale.name), out=out,
        report=_path(args.report, default_report), init_adapter=adapter, model=args.model or "",
        bfcl=scale.bfcl_tasks if args.bfcl is None else args.bfcl,
        humaneval=scale.humaneval_tasks if args.humaneval is None else args.humaneval,
        presets=tuple(args.presets.split(",")) if args.presets else scale.presets,
        isolate=scale.isolate if args.isolate is None else args.isolate,
        ablation_eval=args.ablation_eval,
        only=frozenset(args.only.split(",")) if args.only else frozenset(),
        extra=tuple(args.set or ()), argv=tuple(argv))


def command_for(experiment: str, args: argparse.Namespace) -> str:
    """The command that reproduces ``experiment`` with this invocation's result options."""
    parts = [PYTHON, "-m", "benchmarks.experiments", experiment, "--scale", args.scale]
    for name in _RESULT_OPTIONS:
        value = getattr(args, name)
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            parts.append(flag)
        elif isinstance(value, list):
            parts += [item for v in value for item in (flag, v)]
        else:
            parts += [flag, repr(value) if value == "" else str(value)]
    return " ".join(parts)


def ensure_warm_start(st: plan.Settings, jobs: list[plan.Job]) -> None:
    """Create the warm-start adapter (`lopd sft --steps 30`) if a run needs it and it is missing."""
    if not plan.needs_warm_start(st, jobs):
        return
    out = Path(st.init_adapter).parent
    # mixed batches: the warm start the committed laptop sweep was run from
    print(f"warm start: lopd sft --steps 30 --mixed-batches --out {out}", flush=True)
    subprocess.run([sys.executable, "-m", "lopd.cli", "sft", "--model", st.model or "smollm2-135m",
                    "--out", str(out), "--steps", "30", "--mixed-batches"], cwd=REPO, check=True)


def plan_summary(jobs: list[plan.Job], st: plan.Settings) -> tuple[str, list[str]]:
    """One line (runs, finished, estimated wall time of the rest) and the per-run breakdown."""
    done, topped = set(), []
    for job in jobs:
        try:
            result = runner.load_result(job)
        except runner.RunMismatch as err:
            print(f"warning: {err}")
            continue
        if result is not None:
            done.add(job.key)
            extra = runner.missing_evals(job, result)
            if extra:
                topped.append(f"  {job.key:<28} finished; to evaluate on {', '.join(extra)}")
    seconds, lines = plan.estimate(jobs, st, done)
    eta = "unknown" if seconds is None else f"~{seconds / 60:.0f} min"
    return (f"plan ({st.scale.name} scale): {len(jobs)} runs, {len(done)} already finished "
            f"({len(topped)} of them to evaluate on more suites), {len(jobs) - len(done)} to "
            f"run; estimated wall time of the runs {eta}"), lines + topped


def print_plan(jobs: list[plan.Job], st: plan.Settings) -> None:
    line, lines = plan_summary(jobs, st)
    print(line, flush=True)
    print("\n".join(lines), flush=True)


def _results(specs: list[plan.RunSpec], st: plan.Settings) -> dict[str, dict | None]:
    found = {}
    for spec in specs:
        try:
            found[spec.key] = runner.load_result(plan.job_for(spec, st))
        except runner.RunMismatch as err:
            print(f"warning: {err}")
            found[spec.key] = None
    return found


def _finished(job: plan.Job) -> bool:
    try:
        return runner.load_result(job) is not None
    except runner.RunMismatch:
        return False


def run_experiments(names: list[str], st: plan.Settings, args: argparse.Namespace) -> int:
    specs = {name: plan.experiment_runs(name, st) for name in names}
    todo = plan.selected([s for name in names for s in specs[name]], st)
    jobs = [plan.job_for(s, st) for s in todo]
    print_plan(jobs, st)
    if args.dry_run:
        return 0
    if args.no_new_runs:
        jobs = [job for job in jobs if _finished(job)]
    started = time.perf_counter()
    ensure_warm_start(st, jobs)
    runner.execute(jobs, st.isolate)
    for name in names:
        record = records.write_record(name, st, specs[name], _results(specs[name], st),
                                      command_for(name, args), time.perf_counter() - started)
        print(f"{name}: {st.out / (name + '.json')}")
        for png in record["plots"]:
            print(f"  plot: {st.out / png}")
    return write(st, args)


def write(st: plan.Settings, args: argparse.Namespace) -> int:
    commands = {name: command_for(name, args) for name in (*plan.EXPERIMENTS, "report", "all")}
    specs = plan.selected([s for name in plan.EXPERIMENTS
                           for s in plan.experiment_runs(name, st)], st)
    line = plan_summary([plan.job_for(s, st) for s in specs], st)[0]
    status = "" if st.scale.cost is None else (
        f"{line[0].upper()}{line[1:]} (from measured step times of the 2-core dev box).")
    path = write_report(records.read_records(st.out), st.report, st.out, st.scale.name,
                        commands, st.scale.notes, status)
    print(f"report: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_run"]:  # a run in a subprocess (``--isolate``)
        runner.exit_with_parent()
        runner.run_one(plan.Job.from_json(json.loads(Path(argv[1]).read_text())))
        return 0
    args = build_parser().parse_args(argv)
    st = settings(args, argv)
    if st.scale.name == "paper" and not st.model and args.experiment != "report":
        print("paper scale needs --model /path/to/Qwen3-4B (lopd never downloads models)",
              file=sys.stderr)
        return 2
    if args.experiment == "report":
        return write(st, args)
    names = list(plan.EXPERIMENTS) if args.experiment == "all" else [args.experiment]
    return run_experiments(names, st, args)
