"""The learning sweep's report: `benchmarks/results/learning.md` and its plots, from the run
summaries in `benchmarks/results/learning/`.

Every number is computed from the committed summaries (`benchmarks.learning` writes one per
run); nothing here trains or evaluates. The sections:

- one row per run: held-out ToolWorld success +- SE and its paired gain over the warm start
  it began from (same tasks, so the SE is that of the per-task differences), and per variant
  the seeds pooled;
- held-out points along the budget (`curve`) and by difficulty tier;
- the method table: every variant pooled over its seeds on each evaluated suite (held-out
  ToolWorld, the transfer domain, HumanEval), each with its paired gain over the warm start;
- the ablations: each LOPD ablation against LOPD itself at the same seed and budget, paired
  on the same held-out tasks, with what the ablation acts on (the privilege Delta, beta);
- efficiency: for each method against the reference (GRPO at the same setting), the share of
  the reference's budget at which the method first reaches the reference's final held-out
  success, and its final smoothed train reward;
- `learning.png` (every run) and `learning_efficiency.png` (per variant: mean over seeds with
  the seeds' spread).
"""

from __future__ import annotations

import json
from pathlib import Path

from lopd.evaluate import paired_gain as paired
from lopd.evaluate import standard_error

WARM = "warm-start"
HELDOUT = "toolworld-test"
SMOOTH = 5
"""Train reward is shown as a moving mean over this many steps."""


def load_summaries(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]


def fingerprint_of(summary: dict) -> str:
    return summary.get("warm_start", "unknown")


def warm_starts(summaries: list[dict]) -> dict[str, dict]:
    """The warm start's evaluation for each fingerprint."""
    return {fingerprint_of(s): s for s in summaries if s["name"] == WARM}


def suite_result(run: dict, suite: str) -> dict | None:
    """A run's evaluation on ``suite``: the held-out ToolWorld result of the run itself, or
    one added afterwards (`benchmarks.learning suites`)."""
    if suite == HELDOUT:
        return run["heldout"]
    return run.get("suites", {}).get(suite)


def _se(point: dict) -> float:
    """Standard error of a held-out point's success rate, from its per-task successes."""
    return standard_error(list(point["per_task"].values()))


def pooled(runs: list[dict], suite: str = HELDOUT) -> dict[str, float]:
    """Per-task success averaged over a variant's seeds (the unit of its paired comparison)."""
    tasks: dict[str, list[float]] = {}
    for run in runs:
        for task, value in (suite_result(run, suite) or {}).get("per_task", {}).items():
            tasks.setdefault(task, []).append(value)
    return {t: sum(v) / len(v) for t, v in tasks.items()}


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def by_variant(summaries: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(variant name, warm-start fingerprint) -> its runs, in summary order."""
    variants: dict[tuple[str, str], list[dict]] = {}
    for s in summaries:
        variants.setdefault((s["name"], fingerprint_of(s)), []).append(s)
    return variants


def train_seconds(run: dict) -> float:
    """Seconds the run's steps took, summed over every process that trained it (a resumed
    run's last process alone trains no step); the process's own clock where steps lack it."""
    return sum(step.get("time/total", 0.0) for step in run["steps"]) or run["timing"].get(
        "train_s", 0.0)


def report_lines(summaries: list[dict]) -> list[str]:
    warms = warm_starts(summaries)
    lines = [("| variant | seed | rollouts | held-out success (n) +- SE | gain over warm start +- "
             "paired SE | train reward, last 5 steps | train s | eval s |"), "|" + "---|" * 8]
    for (name, fingerprint), runs in by_variant(summaries).items():
        warm = warms.get(fingerprint)
        base = warm["heldout"]["per_task"] if warm else {}
        for run in runs:
            h = run["heldout"]
            gain = "-" if name == WARM or not base else "{:+.3f} +- {:.3f}".format(
                *paired(h["per_task"], base)[:2])
            tail = [r["reward"] for r in run["steps"][-5:]]
            lines.append(
                f"| {run['label']} [w {fingerprint}] | {run['seed']} | {run['rollouts']} | "
                f"{h['success']:.3f} ({h['n']}) +- {_se(h):.3f} | {gain} | {_mean(tail):.3f} | "
                f"{train_seconds(run):.0f} | {h.get('seconds', 0):.0f} |")
        if len(runs) > 1 and name != WARM and base:
            per_task = pooled(runs)
            gain, se, n = paired(per_task, base)
            lines.append(f"| **{runs[0]['label']}, mean of {len(runs)} seeds** | - | "
                         f"{runs[0]['rollouts']} | {_mean(per_task.values()):.3f} ({n}) | "
                         f"{gain:+.3f} +- {se:.3f} | - | - | - |")
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
        lines.append(f"| {run['label']} [w {fingerprint_of(run)}] | {run['seed']} | "
                     f"{'; '.join(cells)} |")
    return [*lines, ""]


def rule_lines(summaries: list[dict]) -> list[str]:
    """On the rules suites: per run, the held-out tasks solved among those whose reference
    meets a rule (a rule-blind solution fails them) and among the rule-free ones, at each
    evaluated point: whether a method learned a rule or only the tools."""
    from lopd.envs.toolworld import load_tasks

    ruled = {t.id: bool(t.metadata["rules"]) for t in load_tasks("rules-test")}
    if not any(task in ruled for run in summaries for task in run["heldout"]["per_task"]):
        return []
    n_ruled = sum(ruled.values())
    lines = [(f"Held-out tasks solved that depend on a rule ({n_ruled}) / that do not "
              f"({len(ruled) - n_ruled}), at each evaluated point (rollouts):"), "",
             "| variant | seed | points |", "|---|---|---|"]
    warms = warm_starts(summaries)
    for run in summaries:
        points = heldout_points(run, None if run["name"] == WARM else warms.get(fingerprint_of(run)))
        cells = []
        for point in points:
            won = [t for t, v in point["per_task"].items() if v >= 1.0 and t in ruled]
            cells.append(f"{point['rollouts']}: {sum(ruled[t] for t in won)} / "
                         f"{sum(not ruled[t] for t in won)}")
        lines.append(f"| {run['label']} [w {fingerprint_of(run)}] | {run['seed']} | "
                     f"{'; '.join(cells)} |")
    return [*lines, ""]


def test_tiers(split: str = "test") -> dict[str, int]:
    """Held-out task id -> difficulty tier (tool calls in the reference solution)."""
    from lopd.envs.toolworld import load_tasks

    return {task.id: int(task.metadata["tier"]) for task in load_tasks(split)}


def tier_lines(summaries: list[dict]) -> list[str]:
    """Held-out success per difficulty tier for every run: where a gain comes from."""
    rules = any(task.startswith("tw-rules-test-") for run in summaries
                for task in run["heldout"]["per_task"])
    tiers = test_tiers("rules-test" if rules else "test")
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
        cells = [f"{_mean(by_tier[t]):.3f}" if by_tier.get(t) else "-" for t in wanted]
        lines.append(f"| {run['label']} [w {fingerprint_of(run)}] | {run['seed']} | "
                     + " | ".join(cells) + " |")
    return [*lines, ""]


def method_table_lines(summaries: list[dict], suites: tuple[str, ...],
                       rows: tuple[str, ...] = ()) -> list[str]:
    """Every variant evaluated beyond held-out ToolWorld, and every variant named in ``rows``
    (the table's methods, "-" where a suite is not evaluated yet), seeds pooled: success (n)
    +- SE and the paired gain over its warm start, per suite."""
    warms = warm_starts(summaries)
    wanted = [(key, runs) for key, runs in by_variant(summaries).items()
              if key[0] in rows
              or any(suite_result(r, s) for r in runs for s in suites if s != HELDOUT)]
    if not wanted:
        return []
    lines = [("Method table (seeds pooled; each cell: success (tasks) +- SE, then the paired gain "
             "over the warm start on the same tasks):"), "",
             "| variant | seeds | rollouts | " + " | ".join(suites) + " |",
             "|" + "---|" * (3 + len(suites))]
    for (name, fingerprint), runs in sorted(wanted, key=lambda kv: kv[0][0] != WARM):
        warm = warms.get(fingerprint)
        cells = []
        for suite in suites:
            per_task = pooled(runs, suite)
            if not per_task:
                cells.append("-")
                continue
            cell = (f"{_mean(per_task.values()):.3f} ({len(per_task)}) +- "
                    f"{standard_error(list(per_task.values())):.3f}")
            base = pooled([warm], suite) if warm and name != WARM else {}
            if base:
                gain, se, _ = paired(per_task, base)
                cell += f"; {gain:+.3f} +- {se:.3f}"
            cells.append(cell)
        seeds = ",".join(str(r["seed"]) for r in runs)
        lines.append(f"| {runs[0]['label']} [w {fingerprint}] | {seeds} | {runs[0]['rollouts']} | "
                     + " | ".join(cells) + " |")
    return [*lines, ""]


def pooled_points(runs: list[dict], warm: dict | None) -> list[tuple[int, float, int, float]]:
    """(rollouts, held-out success averaged over the seeds with a point there, those seeds, the
    SE over tasks of that average's per-task successes)."""
    at: dict[int, list[dict]] = {}
    for run in runs:
        for point in heldout_points(run, warm):
            at.setdefault(point["rollouts"], []).append(point)
    rows = []
    for rollouts, points in sorted(at.items()):
        per_task = pooled([{"heldout": p} for p in points])
        rows.append((rollouts, _mean(p["success"] for p in points), len(points),
                     standard_error(list(per_task.values()))))
    return rows


def _points_cell(points) -> str:
    return "; ".join(f"{r}: {v:.3f} +- {se:.3f} ({n})" for r, v, n, se in points)


def smoothed(rewards: list[float], window: int = SMOOTH) -> list[float]:
    return [_mean(rewards[max(0, i - window + 1):i + 1]) for i in range(len(rewards))]


def train_curve(runs: list[dict]) -> list[tuple[int, float, float, float]]:
    """(rollouts, mean, min, max) over seeds of the smoothed train reward, per step that every
    seed reached."""
    curves = [smoothed([r["reward"] for r in run["steps"]]) for run in runs]
    steps = min(len(c) for c in curves)
    rollouts = [r["rollouts"] for r in runs[0]["steps"]]
    return [(rollouts[i], _mean(c[i] for c in curves), min(c[i] for c in curves),
             max(c[i] for c in curves)) for i in range(steps)]


def first_reaching(points, target: float) -> int | None:
    """The first rollout count whose value reaches ``target`` (points: (rollouts, value, ...))."""
    return next((p[0] for p in points if p[1] >= target - 1e-9), None)


def efficiency_lines(summaries: list[dict], reference: str, others: tuple[str, ...]) -> list[str]:
    """Each method's share of the reference's budget to reach the reference's final held-out
    success and its final smoothed train reward (seeds averaged)."""
    variants = by_variant(summaries)
    warms = warm_starts(summaries)
    lines = []
    for (name, fingerprint), ref_runs in variants.items():
        if name != reference:
            continue
        warm = warms.get(fingerprint)
        ref_held = pooled_points(ref_runs, warm)[-1]
        ref_train = train_curve(ref_runs)[-1]
        budget = ref_held[0]
        lines += [(f"Efficiency against {ref_runs[0]['label']} (seeds "
                  f"{','.join(str(r['seed']) for r in ref_runs)}; final held-out success "
                  f"{ref_held[1]:.3f}, final train reward, moving mean of {SMOOTH} steps, "
                  f"{ref_train[1]:.3f}, at {budget} rollouts):"), "",
                  ("| variant | seeds | held-out points (rollouts: success +- SE over tasks, "
                   "seeds) | share of the budget to reach its held-out success | to reach its "
                   "train reward |"),
                  "|---|---|---|---|---|",
                  (f"| {ref_runs[0]['label']} (the reference) | "
                   f"{','.join(str(r['seed']) for r in ref_runs)} | "
                   f"{_points_cell(pooled_points(ref_runs, warm))} | - | - |")]
        for other in others:
            runs = variants.get((other, fingerprint))
            if not runs:
                continue
            held = pooled_points(runs, warm)
            cells = _points_cell(held)
            shares = [first_reaching(held, ref_held[1]),
                      first_reaching(train_curve(runs), ref_train[1])]
            text = [f"{s / budget:.0%} ({s} rollouts)" if s is not None else "not reached"
                    for s in shares]
            lines.append(f"| {runs[0]['label']} | {','.join(str(r['seed']) for r in runs)} | "
                         f"{cells} | {text[0]} | {text[1]} |")
        lines.append("")
    return lines


def _mechanism(run: dict, rollouts: int) -> str:
    """Mean privilege Delta over the steps up to ``rollouts`` and beta after them ("-" for a
    summary written before steps kept them)."""
    steps = [s for s in run["steps"] if s["rollouts"] <= rollouts and "delta" in s]
    if not steps:
        return "- | -"
    return f"{_mean(s['delta'] for s in steps):.3f} | {steps[-1]['beta']:.3f}"


def ablation_lines(summaries: list[dict], base: str, ablations: dict[str, str]) -> list[str]:
    """Each ablation run (``ablations``: variant -> what it changes) against the ``base``
    variant's run of the same seed at every budget both were evaluated at: both held-out
    successes, the paired difference (ablation - base) on the same tasks, the ablation's gain
    over the warm start, and the mean Delta and final beta of each."""
    warms = warm_starts(summaries)
    bases = {(fingerprint_of(s), s["seed"]): s for s in summaries if s["name"] == base}
    lines = [("Ablations: each against LOPD at the same seed and budget (held-out success on "
              "the same tasks; difference = ablation - LOPD +- paired SE; Delta: mean over the "
              "steps, beta: after the last):"), "",
             ("| ablation | seed | rollouts | held-out | LOPD | difference | ablation's gain over "
              "the warm start | Delta | beta | LOPD's Delta | LOPD's beta |"),
             "|" + "---|" * 11]
    header = len(lines)
    for run in summaries:
        what = ablations.get(run["name"])
        reference = bases.get((fingerprint_of(run), run["seed"]))
        warm = warms.get(fingerprint_of(run))
        if what is None or reference is None or warm is None:
            continue
        at = {p["rollouts"]: p for p in heldout_points(reference, None)}
        for point in heldout_points(run, None):
            other = at.get(point["rollouts"])
            if other is None:
                continue
            diff, se, _ = paired(point["per_task"], other["per_task"])
            gain, gain_se, _ = paired(point["per_task"], warm["heldout"]["per_task"])
            lines.append(
                f"| {what} | {run['seed']} | {point['rollouts']} | {point['success']:.3f} | "
                f"{other['success']:.3f} | {diff:+.3f} +- {se:.3f} | {gain:+.3f} +- {gain_se:.3f} | "
                f"{_mechanism(run, point['rollouts'])} | {_mechanism(reference, point['rollouts'])} |")
    return [*lines, ""] if len(lines) > header else []


def control_lines(summaries: list[dict]) -> list[str]:
    """The warm start re-evaluated on held-out ToolWorld on another machine: how much the
    numerics (fp32 vs bf16 autocast) move the starting point every gain is paired with."""
    lines = []
    for fingerprint, warm in warm_starts(summaries).items():
        again = warm.get("suites", {}).get(HELDOUT)
        if again:
            gain, se, n = paired(again["per_task"], warm["heldout"]["per_task"])
            lines.append(f"- Warm start [w {fingerprint}] evaluated again on {again['cpu']}: "
                         f"{again['success']:.3f} against {warm['heldout']['success']:.3f} on "
                         f"{warm['cpu']}; difference {gain:+.3f} +- {se:.3f} ({n} tasks).")
    return [*lines, ""] if lines else []


def _from_benchmarks(path: Path) -> str:
    """``path`` from its ``benchmarks/`` folder on (the whole path when it has none)."""
    text = path.as_posix()
    return text[text.find("benchmarks/"):] if "benchmarks/" in text else text


def write_report(results: Path, out: Path, shared: tuple[str, ...], suites: tuple[str, ...],
                 comparisons: dict[str, tuple[str, ...]], table_rows: tuple[str, ...] = (),
                 ablations: tuple[str, dict[str, str]] | None = None,
                 heldout: str = HELDOUT) -> Path:
    """Rewrite ``results/learning.md`` and its two plots from the summaries in ``out``
    (held out on ``heldout``)."""
    summaries = load_summaries(out)
    cpus = sorted({s["cpu"] for s in summaries})
    efficiency = [line for ref, others in comparisons.items()
                  for line in efficiency_lines(summaries, ref, others)]
    text = ["# Learning sweep: held-out ToolWorld success against the warm start", "",
            ("Written by `python -m benchmarks.learning` (see its docstring); one JSON per run in "
            f"`{_from_benchmarks(out)}/`. Held-out: "
            f"greedy, `{heldout}`, 6 turns of at "
            "most 96 tokens. SE: the standard error of a success rate over its tasks; the gain "
            "is paired (the same tasks before and after) and its SE is that of the per-task "
            "differences. Train s: the sum of the run's step times, over every process that "
            "trained it (a resumed run included)."), "", "Shared settings: `" + " ".join(shared) + "`.", "",
            *report_lines(summaries), "", *control_lines(summaries), *curve_lines(summaries),
            *efficiency, *method_table_lines(summaries, suites, table_rows),
            *(ablation_lines(summaries, *ablations) if ablations else []), *tier_lines(summaries),
            *rule_lines(summaries),
            "![learning curves](learning.png)", "",
            "![efficiency: mean over seeds, band = the seeds' spread](learning_efficiency.png)",
            "", "CPU: " + " | ".join(cpus), ""]
    path = results / "learning.md"
    path.write_text("\n".join(text))
    from benchmarks.learning_plots import plot_efficiency, plot_runs

    plot_runs(summaries, results / "learning.png")
    plot_efficiency(summaries, results / "learning_efficiency.png",
                    {name for ref, others in comparisons.items() for name in (ref, *others)})
    return path
