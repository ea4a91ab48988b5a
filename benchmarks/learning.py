"""Learning sweep: which settings make the agent better on held-out ToolWorld, at what budget.

Each *variant* (`benchmarks.learning_variants`) is a named set of config overrides on top of
one shared setting (the SmolLM2 preset from the `lopd sft` warm start, 8 tasks x 4 rollouts a
step from one domain, 6 turns of at most 96 tokens). A run trains one variant on one seed, then
evaluates its student greedily on held-out `toolworld-test` (all 200 tasks by default); the
warm start itself is evaluated once, as step 0. Every comparison is paired on the same tasks:
the report prints each run's success with its standard error and its gain over the warm start
with the paired standard error.

    .venv/bin/python -m benchmarks.learning run --variants grpo-lr5e-4,grpo-lr1e-3 --seeds 0
    .venv/bin/python -m benchmarks.learning run --variants ... --parallel 2   # 1 thread each
    .venv/bin/python -m benchmarks.learning run --variants ""   # the warm start's evaluation only
    .venv/bin/python -m benchmarks.learning report

The method table and the ablations run at one setting (``SETTING``: where GRPO learns), one
variant per method (``grpo-lr5e-4-t0.7-tier1-g8``, ``sdft-...``, ``opsd-...``, ``sdpo-...``,
``skill-sd-...``, ``lopd-...``) and one per LOPD ablation (``lopd-lr5e-4-t0.7-tier1-g8-m0``,
``-frozen``, ``-text``, ``-K8``, ``-J1``, and the authors' choices ``-framed``, ``-shared``,
``-self``); `list` prints them all. The table's other columns come from the same students:

    .venv/bin/python -m benchmarks.learning run --variants sdpo-lr5e-4-t0.7-tier1-g8 --seeds 0,1 \
        --suites toolworld-transfer,humaneval     # train, then evaluate there too
    .venv/bin/python -m benchmarks.learning suites --variants warm-start,skill-sd-lr5e-4-t0.7-tier1-g8

`suites` needs the run directory (it evaluates the final checkpoint), so it runs where the run
ran; for the warm start it also evaluates held-out ToolWorld again, which shows how far this
machine's numerics (bf16 autocast or fp32) move the starting point every gain is paired with.
HumanEval gets one answer of up to 256 tokens (``SUITE_BUDGET``); the other suites the run's
own turn and token budget.

Runs start from the warm start kept in `benchmarks/results/learning/warm-start-adapter/`
(`--init-adapter` to use another). The table's vanilla row is the base model without it:

    .venv/bin/python -m benchmarks.learning run --variants '' --init-adapter '' \
        --suites toolworld-transfer,humaneval

Resumable: runs live under `runs/learning/NAME-sSEED-wFINGERPRINT` (a killed run continues
from its last checkpoint, a finished one is skipped; `benchmarks.experiments.runner`), and a
run whose summary is already committed (same settings, same warm start) is not run again. As each run ends
its summary (per-step train reward, held-out success per task, timing, the CPU) is written to
`benchmarks/results/learning/NAME-sSEED-wFINGERPRINT.json` and the report
`benchmarks/results/learning.md` (+ `learning.png`, `learning_efficiency.png`;
`benchmarks.learning_report`) is rewritten, so results can be committed
run by run. Checkpoints are kept every `--checkpoint-every` steps for held-out points along the
curve (`curve`).

The business-rules suites (`lopd.envs.toolworld.rules`) get the same sweep with `--rules`:
training on `toolworld-rules-train`, held out on `toolworld-rules-test` (200 tasks), summaries
in `benchmarks/results/rules/learning/`, the report `benchmarks/results/rules/learning.md`, run
directories under `runs/rules-learning/`; the warm start is the plain suites' one:

    .venv/bin/python -m benchmarks.learning run --rules --seeds 0 \
        --variants grpo-lr5e-4-t0.7-tier1-g8,lopd-lr5e-4-t0.7-tier1-g8,skill-sd-lr5e-4-t0.7-tier1-g8

The warm start is rebuilt wherever `lopd sft` runs, and two machines do not build the same
adapter (fp32 here, bf16 there). Each summary therefore records the fingerprint of the warm
start it began from (the adapter weights' SHA-256, first 12 hex digits), and a run is compared
only with the warm start's own evaluation for that fingerprint; summaries written before
fingerprints existed count as fingerprint "unknown" and are paired among themselves.
"""

from __future__ import annotations

import argparse
import functools
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
from benchmarks.learning_report import (  # noqa: F401
    WARM,
    fingerprint_of,
    pooled,
    report_lines,
    test_tiers,
    tier_lines,
    warm_starts,
)
from benchmarks.learning_report import write_report as _write_report
from benchmarks.learning_variants import (  # noqa: F401
    ABLATIONS,
    METHOD_LABELS,
    SETTING,
    SHARED,
    VARIANTS,
    setting_overrides,
)
from lopd.evaluate import paired_gain as paired  # noqa: F401

RESULTS = REPO / "benchmarks" / "results"
OUT = RESULTS / "learning"
RUNS = REPO / "runs" / "learning"
HELDOUT = "toolworld-test"
"""The held-out suite every run is evaluated on (``--rules``: ``toolworld-rules-test``)."""
REPORT_DIR: Path | None = None
"""Where ``learning.md`` and its plots are written (None: ``RESULTS``)."""
SWEEP_OVERRIDES: tuple[str, ...] = ()
"""Overrides of this sweep on top of ``SHARED`` (``--rules``: the rules suites)."""
RULES_OVERRIDES = ("data.train_suite=toolworld-rules-train", "data.eval_suite=toolworld-rules-test")
BASE = str(CONFIGS / "toolworld-smollm2.yaml")
WARM_ADAPTER = OUT / "warm-start-adapter"
"""The warm start every run begins from by default, kept in the repository (its README)."""

SUITES = ("toolworld-test", "toolworld-transfer", "humaneval")
"""The method table's columns: held-out ToolWorld, the transfer domain, HumanEval."""
SUITE_BUDGET = {"humaneval": (1, 256)}
"""(turns, new tokens a turn) of a suite where the run's ToolWorld budget does not fit: one
HumanEval answer needs more than 96 tokens. Other suites use the run's own."""
COMPARISONS = {f"grpo-{SETTING}": (f"lopd-{SETTING}", f"lopd-{SETTING}-J1", f"skill-sd-{SETTING}")}
"""Efficiency: reference variant -> the variants measured against its budget (LOPD with J = 1,
the one LOPD ablation that separated upward, among them)."""

RULES_COMPARISONS = {"grpo-lr2e-4-t0.7-tier1-g8": tuple(
    f"{m}-lr2e-4-t0.7-tier1-g8{x}" for m, x in (("lopd", ""), ("lopd", "-text"), ("lopd", "-m0"),
                                                ("lopd", "-diverse"), ("lopd", "-diverse-m0"),
                                                ("skill-sd", "")))}
"""Efficiency on the rules suites: every method at GRPO's step size there (lr 5e-4 collapsed it)."""

_lock = threading.Lock()


def job(name: str, seed: int, steps: int, args: argparse.Namespace, threads: int) -> Job:
    """The run of variant ``name`` on ``seed`` (``WARM``: the warm start, evaluated only)."""
    extra = ("method.name=grpo",) if name == WARM else VARIANTS[name][1]
    warm = adapter_fingerprint(args.init_adapter)
    run_dir = (Path(args.runs) / f"{name}-s{seed}-w{warm}").resolve()
    # the warm start trains no step: its identity must not depend on the checkpoint settings
    keep = [] if name == WARM else [f"run.checkpoint_every={args.checkpoint_every}",
                                    "run.keep_checkpoints=100"]
    overrides = [*SHARED, *SWEEP_OVERRIDES, f"model.init_adapter={args.init_adapter}",
                 f"run.seed={seed}",
                 f"optim.steps={0 if name == WARM else steps}", f"run.threads={threads}",
                 *keep, *extra, *args.set, f"run.out_dir={run_dir}"]
    evals = {HELDOUT: args.eval_tasks or None}
    return Job(f"learning/{name}-s{seed}", name, _method(extra),
               seed, str(run_dir), BASE, overrides, evals, False,
               str((Path(args.runs) / "_coldstart").resolve()), eval_batch=args.eval_batch)


adapter_fingerprint = runner.adapter_fingerprint


def _warm_start(job: Job) -> str:
    """The fingerprint of the warm start ``job`` trains from (its ``model.init_adapter``)."""
    adapter = next((o.split("=", 1)[1] for o in job.overrides
                    if o.startswith("model.init_adapter=")), "")
    return adapter_fingerprint(adapter)


def _method(overrides: tuple[str, ...]) -> str:
    return next((o.split("=", 1)[1] for o in overrides if o.startswith("method.name=")), "lopd")


STEP_KEYS = ("step", "rollouts", "reward", "time/total", "delta", "beta", "distill")
"""What a summary keeps of each training step (Delta and beta: what LOPD's ablations act on)."""


def summary(job: Job, result: dict, cpu: str) -> dict:
    """What the report needs from a finished run (the run directory is not committed)."""
    held = result["eval"][HELDOUT]
    steps = [{k: r[k] for k in STEP_KEYS if k in r}
             for r in result["metrics"]]
    return {
        "name": job.name, "seed": job.seed, "method": job.method,
        "label": _label(job),
        "overrides": [o for o in job.overrides if not o.startswith("run.out_dir=")],
        "rollouts": steps[-1]["rollouts"] if steps else 0, "steps": steps,
        "heldout": {k: held[k] for k in ("n", "success", "reward", "per_task", "seconds")
                    if k in held},
        "run_dir": str(Path(job.run_dir).relative_to(REPO)) if Path(job.run_dir).is_relative_to(REPO)
        else job.run_dir,
        "timing": result["timing"], "peak_rss_mb": result["peak_rss_mb"], "cpu": cpu,
        "finished": result["finished"], "warm_start": _warm_start(job),
    }


def _label(job: Job) -> str:
    """The variant's label; the warm start's run without an adapter is vanilla (the base model)."""
    if job.name in VARIANTS:
        return VARIANTS[job.name][0]
    return ("vanilla (the base model, no warm start)" if _warm_start(job) == "none"
            else "warm start (no training)")


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


def run_job(job: Job, cpu: str, isolate: bool, suites: list[str] | None = None,
            at: set[int] | None = None) -> None:
    """Train + evaluate (resuming), then write its summary and the report, then evaluate the
    run on ``suites`` and its checkpoints ``at`` while its directory is here; a run whose
    summary is already committed is not trained again."""
    if committed(job):
        print(f"[learning] {job.key}: summary already in {OUT}, skipped", flush=True)
        if Path(job.run_dir).exists():
            evaluate_here(job, suites, at)
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
    evaluate_here(job, suites, at)


def evaluate_here(job: Job, suites: list[str] | None, at: set[int] | None) -> None:
    """The evaluations that need the run directory (run directories are not committed), done
    right after the run: the other suites, then the held-out points along the budget."""
    if not (suites or at):
        return
    threads = int(next((o.split("=", 1)[1] for o in job.overrides
                        if o.startswith("run.threads=")), 2))
    if suites:
        suite_points(summary_path(job), suites, threads, job.eval_batch)
    if at:
        curve_points(summary_path(job), threads, job.eval_batch, at)
    with _lock:
        write_report()


def eval_spec(config: dict[str, str], suite: str, adapter: str, out: Path, threads: int,
              eval_batch: int, limit: int = 0):
    """Greedy evaluation of a run's student (``adapter`` on its warm start) on ``suite``, with
    the run's turn and token budget unless ``SUITE_BUDGET`` names the suite's own."""
    from lopd.evaluate import EvalSpec

    turns, tokens = SUITE_BUDGET.get(suite, (int(config["rollout.max_steps"]),
                                             int(config["rollout.max_new_tokens"])))
    return EvalSpec(model=config.get("model.name", "smollm2-135m"), suites=[suite], limit=limit,
                    out_dir=str(out), adapter=adapter,
                    init_adapter=config.get("model.init_adapter", ""), threads=threads,
                    dtype=config.get("model.dtype", "auto"), max_new_tokens=tokens,
                    max_steps=turns, batch_size=eval_batch)


def curve_points(summary_path: Path, threads: int, eval_batch: int,
                 steps: set[int] | None = None) -> int:
    """Evaluate a finished run's kept checkpoints (all but the last, whose held-out result is
    the run's own; only ``steps`` if given) on the same held-out tasks; add them to its
    summary as ``curve``. Returns the number of new points. Resumable: points already in the
    summary are kept."""
    from lopd.checkpoint import list_checkpoints
    from lopd.evaluate import run_eval

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
        spec = eval_spec(config, HELDOUT, str(checkpoint / "student"),
                         checkpoint / "heldout", threads, eval_batch, limit=data["heldout"]["n"])
        held = finished_eval(spec)
        if held is None:
            with runner.evaluation_slot():
                held = run_eval(spec)[HELDOUT]
        point = {"step": step, "rollouts": step * per_step, "n": held["n"],
                 "success": held["success"], "per_task": held["per_task"]}
        update_summary(summary_path, functools.partial(_with_curve_point, point=point))
        added += 1
    return added


def _with_curve_point(summary: dict, point: dict) -> None:
    curve = [p for p in summary.get("curve", []) if p["step"] != point["step"]]
    summary["curve"] = sorted([*curve, point], key=lambda p: p["step"])


def _with_suite(summary: dict, suite: str, entry: dict) -> None:
    summary.setdefault("suites", {})[suite] = entry


def update_summary(path: Path, change) -> None:
    """Apply ``change`` to the summary at ``path`` as it is on disk now, under a lock, and write
    it back: two processes adding points and suites to one summary each keep the other's."""
    import fcntl
    import tempfile

    with open(Path(tempfile.gettempdir()) / f"lopd-summary-{path.stem}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data, indent=1) + "\n")


def finished_eval(spec) -> dict | None:
    """The result of ``spec``'s one suite from the ``eval.json`` a finished evaluation of the
    same student, budget and task count left in its output directory (a process that stopped
    before recording it), else None; its ``seconds`` are the evaluation's."""
    path = Path(spec.out_dir) / "eval.json"
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    meta, (suite,) = saved["meta"], spec.suites
    same = all(meta.get(key) == getattr(spec, key) for key in
               ("adapter", "init_adapter", "dtype", "max_steps", "max_new_tokens", "limit"))
    result = saved["results"].get(suite)
    return {**result, "seconds": meta.get("seconds", 0)} if same and result else None


def write_report() -> Path:
    """Rewrite `learning.md` and its plots from every committed summary."""
    return _write_report(REPORT_DIR or RESULTS, OUT, SHARED, SUITES, COMPARISONS,
                         tuple(f"{method}-{SETTING}" for method in METHOD_LABELS),
                         (f"lopd-{SETTING}", {f"lopd-{SETTING}-{key}": label
                                              for key, (label, _) in ABLATIONS.items()}),
                         heldout=HELDOUT)


def suite_points(path: Path, suites: list[str], threads: int, eval_batch: int) -> int:
    """Evaluate a run's final student (the warm start itself for ``WARM``) greedily on each of
    ``suites`` its summary does not hold yet, and add the results under ``suites``. Held-out
    ToolWorld is the run's own result, so it is evaluated again only for the warm start: that
    measures how far this machine's numerics move the starting point. Needs the run directory
    (a trained run's last checkpoint); returns the number of new evaluations."""
    from benchmarks.bench_throughput import cpu_line
    from lopd.checkpoint import list_checkpoints
    from lopd.evaluate import run_eval

    data = json.loads(path.read_text())
    have = data.setdefault("suites", {})
    todo = [s for s in suites if s not in have and (s != HELDOUT or data["name"] == WARM)]
    if not todo:
        return 0
    config = dict(o.split("=", 1) for o in data["overrides"])
    adapter, out = "", RUNS / f"{path.stem}-suites"
    if data["name"] != WARM:
        checkpoints = list_checkpoints(REPO / data["run_dir"])
        final = len(data["steps"])
        if not checkpoints or int(checkpoints[-1].name.removeprefix("step-")) != final:
            raise SystemExit(f"{path.stem}: its final checkpoint (step {final} in "
                             f"{data['run_dir']}/checkpoints) is not here; suites are evaluated "
                             "where the run ran")
        adapter, out = str(checkpoints[-1] / "student"), checkpoints[-1] / "suites"
    cpu = cpu_line()
    for suite in todo:
        spec = eval_spec(config, suite, adapter, out / suite, threads, eval_batch)
        result = finished_eval(spec)
        if result is None:
            with runner.evaluation_slot():
                started = time.perf_counter()
                result = {**run_eval(spec)[suite], "seconds": time.perf_counter() - started}
        entry = {**{k: result[k] for k in ("n", "success", "reward", "per_task")},
                 "seconds": round(result["seconds"], 1), "max_steps": spec.max_steps,
                 "max_new_tokens": spec.max_new_tokens, "cpu": cpu}
        update_summary(path, functools.partial(_with_suite, suite=suite, entry=entry))
    return len(todo)


def use_rules_suites() -> None:
    """Switch this sweep to the business-rules suites (``lopd.envs.toolworld.rules``): training
    on ``toolworld-rules-train``, held-out ``toolworld-rules-test``, summaries in
    `benchmarks/results/rules/learning/` and the report in `benchmarks/results/rules/`, run
    directories under `runs/rules-learning/`, efficiency against GRPO at lr 2e-4 (``RULES_COMPARISONS``).
    The warm start is ``--init-adapter``'s (the compared one: ``rules/icl-warm-start-adapter``)."""
    global OUT, RUNS, HELDOUT, REPORT_DIR, SWEEP_OVERRIDES, COMPARISONS
    REPORT_DIR = RESULTS / "rules"
    COMPARISONS = RULES_COMPARISONS
    OUT = REPORT_DIR / "learning"
    RUNS = REPO / "runs" / "rules-learning"
    HELDOUT = "toolworld-rules-test"
    SWEEP_OVERRIDES = RULES_OVERRIDES


def _summaries_of(names: set[str], seeds: str | None) -> list[Path]:
    """The committed summaries of the variants ``names`` (only of ``seeds`` if given)."""
    wanted_seeds = {int(s) for s in seeds.split(",")} if seeds else None
    return [path for path in sorted(OUT.glob("*.json"))
            if (data := json.loads(path.read_text()))["name"] in names
            and (wanted_seeds is None or data["seed"] in wanted_seeds)]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.learning", description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["run", "curve", "suites", "report", "list"],
                   help="run: train + evaluate; curve: evaluate finished runs' kept checkpoints; "
                        "suites: evaluate finished runs (and the warm start) on --suites; "
                        "report: rewrite learning.md/png; list: the variants")
    p.add_argument("--variants", default="grpo-lr1e-3", help="comma-separated (see `list`)")
    p.add_argument("--seeds", default=None,
                   help="comma-separated training seeds (run: default 0; curve and suites: "
                        "default every seed with a summary)")
    p.add_argument("--steps", type=int, default=24, help="training steps (32 rollouts each)")
    p.add_argument("--eval-tasks", type=int, default=0, help="held-out tasks (0 = all 200)")
    p.add_argument("--init-adapter", default=str(WARM_ADAPTER.relative_to(REPO)),
                   help="the warm start (default: the one kept in the repository)")
    p.add_argument("--runs", default=None, help="run directories root (default runs/learning, "
                   "with --rules runs/rules-learning)")
    p.add_argument("--rules", action="store_true",
                   help="the business-rules suites: train on toolworld-rules-train, hold out "
                        "toolworld-rules-test, results in benchmarks/results/rules/")
    p.add_argument("--checkpoint-every", type=int, default=8)
    p.add_argument("--eval-batch", type=int, default=100,
                   help="held-out episodes generated together (a run evaluating 100 at once "
                        "reached 13 GB, one evaluating 25 2.4 GB; use 25 while another run "
                        "trains on a 24 GB machine; then LOPD_EVAL_SLOTS=2 lets two processes "
                        "evaluate at once)")
    p.add_argument("--suites", default=None,
                   help=f"suites: which (default {','.join(SUITES)}); run: evaluate each "
                        "finished run on these too (default: none beyond held-out ToolWorld)")
    p.add_argument("--at", default="", help="curve: only these checkpoint steps (comma-separated); "
                   "run: evaluate these checkpoints right after each run")
    p.add_argument("--parallel", type=int, default=1,
                   help="runs at once, each in its own process with 2/N threads (the warm "
                        "start's evaluation runs first, alone, with 2); curve and suites "
                        "evaluate one run at a time with 2/N threads, leaving the rest free; "
                        "every process on the machine evaluates one at a time (memory)")
    p.add_argument("--set", action="append", default=[], metavar="section.field=value",
                   help="override for every run (repeatable; changes the runs' identity)")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=True,
                   help="each run in a fresh Python process (clean peak memory)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.rules:
        use_rules_suites()
    args.runs = args.runs or str(RUNS)
    if args.command == "list":
        print("\n".join(f"{k}: {label}  [{' '.join(o)}]" for k, (label, o) in VARIANTS.items()))
        return 0
    if args.command == "report":
        print(write_report())
        return 0
    if args.command in ("curve", "suites"):
        _evaluate_finished(args)
        return 0
    return _run(p, args, argv)


def _evaluate_finished(args) -> None:
    """`curve` and `suites`: new evaluation points of the finished runs, the report after each."""
    threads = max(1, 2 // args.parallel)
    at = {int(step) for step in args.at.split(",") if step}
    suites = (args.suites or ",".join(SUITES)).split(",")
    for path in _summaries_of(set(args.variants.split(",")), args.seeds):
        if args.command == "curve":
            added = f"{curve_points(path, threads, args.eval_batch, at)} new points"
        else:
            added = f"{suite_points(path, suites, threads, args.eval_batch)} new suites"
        print(f"[learning] {path.stem}: {added}")
        with _lock:
            write_report()


def _run(p: argparse.ArgumentParser, args, argv: list[str] | None) -> int:
    """`run`: the warm start's evaluation, then every variant x seed, then the report."""
    threads = max(1, 2 // args.parallel)
    names = [WARM, *(n for n in args.variants.split(",") if n)]  # "": the warm start only
    unknown = [n for n in names[1:] if n not in VARIANTS]
    if unknown:
        p.error(f"unknown variants {unknown}; see `list`")
    seeds = [int(s) for s in (args.seeds or "0").split(",")]
    jobs = [job(WARM, 0, 0, args, 2)] + [job(n, s, args.steps, args, threads)
                                         for n in names[1:] for s in seeds]
    from benchmarks.bench_throughput import cpu_line

    cpu = cpu_line()
    print(f"[learning] {len(jobs)} runs; command: {shlex.join([sys.executable, '-m', 'benchmarks.learning', *(argv or sys.argv[1:])])}")
    suites = args.suites.split(",") if args.suites else None
    at = {int(step) for step in args.at.split(",") if step}
    run_job(jobs[0], cpu, args.isolate, suites)  # the warm start (or vanilla) gets the suites too
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        for future in [pool.submit(run_job, j, cpu, args.isolate, suites, at)
                       for j in jobs[1:]]:
            future.result()
    print(write_report())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
