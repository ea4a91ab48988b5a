"""The demo's learner on the headline's held-out set: `make demo` trains 256 GRPO rollouts
(mixed-domain steps, LoRA lr 2.5e-4, the turn cap scored 0) and is held out on the tier-1 test
split; the README's results table holds out all 200 tasks of `toolworld-test` (tiers 1-5) at
6 turns x 96 tokens, where GRPO at the learning sweep's setting gained +0.043 +- 0.019 in 768
rollouts. This evaluates demo runs (and the warm start, with the same backend and numerics) on
that set, so the two recipes compare on one yardstick:

    .venv/bin/python -m benchmarks.studies.demo_on_headline eval --warm-start
    .venv/bin/python -m benchmarks.studies.demo_on_headline eval --run runs/demo/grpo --name demo-s0
    .venv/bin/python -m benchmarks.studies.demo_on_headline report

Each evaluation is one `lopd eval` process (greedy, `--batch-size 100`); its per-task successes
go to ``benchmarks/results/studies/demo_on_headline/<name>.json``. ``report`` writes
``demo_on_headline.md``: each run and the runs pooled (per-task success averaged over runs),
paired against the warm start, overall, by tier and by domain.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from benchmarks.bench_throughput import cpu_line
from benchmarks.learning_report import pooled
from lopd.evaluate import paired_gain

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "benchmarks" / "results" / "studies" / "demo_on_headline"
WARM_ADAPTER = "benchmarks/results/learning/warm-start-adapter"
SUITE, TURNS, TOKENS = "toolworld-test", 6, 96
WARM = "warm-start"


def evaluate(run_dir: str | None, name: str, from_eval: str | None = None) -> dict:
    """One `lopd eval` of a run's student (or of the warm start) on the headline's set, or the
    ``eval.json`` of one already run with this command's settings (``from_eval``)."""
    source = ["--run", run_dir] if run_dir else ["--init-adapter", WARM_ADAPTER]
    command = [sys.executable, "-m", "lopd.cli", "eval", *source, "--suite", SUITE,
               "--max-steps", str(TURNS), "--max-new-tokens", str(TOKENS), "--batch-size", "100"]
    if from_eval:
        result = json.loads(Path(from_eval).read_text())
        _check_settings(result["meta"], run_dir)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([*command, "--out", tmp], check=True, cwd=REPO)
            result = json.loads((Path(tmp) / "eval.json").read_text())
    summary = result["results"][SUITE]
    record = {"name": name, "run": run_dir or WARM_ADAPTER, "method": _method(run_dir),
              "success": summary["success"],
              "per_task": summary["per_task"], "seconds": result["meta"]["seconds"],
              "backend": result["meta"]["backend"], "cpu": cpu_line(),
              "command": " ".join(command[1:])}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(record, indent=2))
    return record


def _method(run_dir: str | None) -> str:
    """The training method of a run directory (``method.name`` of its config.yaml)."""
    if not run_dir:
        return "warm start"
    from lopd.config import load_config

    return load_config(Path(run_dir) / "config.yaml").method.name


def _check_settings(meta: dict, run_dir: str | None) -> None:
    """Refuse an ``eval.json`` that was not this study's evaluation of this model."""
    wanted = {"suites": [SUITE], "max_steps": TURNS, "max_new_tokens": TOKENS, "temperature": 0.0,
              "samples": 1, "limit": 0, "run": run_dir or "",
              "init_adapter": "" if run_dir else WARM_ADAPTER}
    wrong = {k: meta.get(k) for k, v in wanted.items() if meta.get(k) != v}
    if wrong:
        raise SystemExit(f"--from-eval: the evaluation differs from this study's in {wrong}; "
                         f"wanted {wanted}")


def _groups(per_task: dict[str, float]) -> dict[str, list[str]]:
    """Task ids by tier and by domain (`tier 1`, ..., `banking`, ...)."""
    from lopd.envs import load_suite

    groups: dict[str, list[str]] = defaultdict(list)
    for task in load_suite(SUITE):
        if task.id in per_task:
            groups[f"tier {task.metadata['tier']}"].append(task.id)
            groups[task.domain].append(task.id)
    return dict(sorted(groups.items(), key=lambda kv: (not kv[0].startswith("tier"), kv[0])))


def _cell(after: dict[str, float], before: dict[str, float], ids: list[str]) -> str:
    gain, se, _n = paired_gain({t: after[t] for t in ids}, {t: before[t] for t in ids})
    return f"{sum(before[t] for t in ids):.0f} -> {sum(after[t] for t in ids):.0f} ({gain:+.3f} +- {se:.3f})"


def report() -> str:
    warm = json.loads((OUT / f"{WARM}.json").read_text())
    runs = [json.loads(p.read_text()) for p in sorted(OUT.glob("*.json")) if p.stem != WARM]
    rows = [(r["name"], r["per_task"], r) for r in runs]  # (name, per-task success, record)
    for method in sorted({r["method"] for r in runs}):
        same = [r for r in runs if r["method"] == method]
        if len(same) > 1:
            rows.append((f"{method}, pooled ({len(same)} runs)",
                         pooled([{"heldout": r} for r in same]), None))
    base = warm["per_task"]
    lines = ["# The demo's learner on the headline's held-out set", "",
             (f"`python -m benchmarks.studies.demo_on_headline report`; all 200 tasks of `{SUITE}`, "
             f"greedy, {TURNS} turns x {TOKENS} tokens, each run paired against the warm start "
             f"evaluated the same way (backend {warm['backend']}). CPU: {warm['cpu']}."), "",
             "| run | held-out success | paired gain +- SE | gain / SE | eval s |", "|---|---|---|---|---|",
             f"| warm start (`{WARM_ADAPTER}`) | {warm['success']:.3f} | - | - | {warm['seconds']:.0f} |"]
    for name, per_task, run in rows:
        gain, se, _ = paired_gain(per_task, base)
        success = sum(per_task.values()) / len(per_task)
        seconds = f"{run['seconds']:.0f}" if run else "-"
        source = f"{run['method']}, `{run['run']}`" if run else "per-task mean over the runs"
        lines.append(f"| {name} ({source}) | {success:.3f} | "
                     f"**{gain:+.3f} +- {se:.3f}** | {gain / se if se else float('nan'):.1f} | {seconds} |")
    groups = _groups(base)
    lines += ["", "Successes before -> after (paired gain +- SE), by tier and domain:", "",
              "| group | tasks | " + " | ".join(name for name, _, _ in rows) + " |",
              "|---|---|" + "---|" * len(rows)]
    for group, ids in groups.items():
        lines.append(f"| {group} | {len(ids)} | " +
                     " | ".join(_cell(per_task, base, ids) for _, per_task, _ in rows) + " |")
    text = "\n".join(lines) + "\n"
    (OUT.parent / "demo_on_headline.md").write_text(text)
    return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["eval", "report"])
    p.add_argument("--run", default=None, help="run directory of a demo's trainer (RUN/grpo)")
    p.add_argument("--name", default=None, help="result name (default: the run's parent folder)")
    p.add_argument("--warm-start", action="store_true", help="evaluate the committed warm start")
    p.add_argument("--from-eval", default=None,
                   help="take the eval.json of a `lopd eval` already run with these settings")
    args = p.parse_args()
    if args.command == "report":
        print(report())
        return
    if bool(args.run) == args.warm_start:
        p.error("eval needs exactly one of --run DIR and --warm-start")
    name = WARM if args.warm_start else (args.name or Path(args.run).resolve().parent.name)
    record = evaluate(args.run, name, args.from_eval)
    print(f"{name}: success {record['success']:.3f} in {record['seconds']:.0f} s")


if __name__ == "__main__":
    main()
