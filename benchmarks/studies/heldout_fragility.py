"""Why the distillation rows lose the same held-out tasks at any step size: how close the warm
start's winning greedy decisions are.

A held-out ToolWorld task counts as solved when every token of the warm start's greedy episode
stays the argmax. If a winning episode holds a near-tie (top-1 and top-2 log-probabilities a
few hundredths of a nat apart), any consistent drift of the policy flips it, however small the
step that caused the drift. This script:

1. replays the warm start greedily on the held-out tasks its committed evaluation solved (the
   evaluation with this machine's numerics: bf16 autocast or fp32);
2. measures each winning episode's closest decision: the smallest gap, over its sampled tokens,
   between the chosen token's log-probability and the best other token's (teacher-forced);
3. teacher-forces the same episodes through trained students (``--students``, checkpoints of
   the learning sweep's runs) and records whether any argmax flips, where the first flip is,
   and how far the chosen tokens' log-probabilities moved;
4. groups the tasks by how many of the sweep's distillation runs lost them (their committed
   per-task results) and reports each group's closeness.

    .venv/bin/python -m benchmarks.studies.heldout_fragility \\
        --students sdpo-lr5e-5-t0.7-tier1-g8-s0@8,sdpo-lr5e-5-t0.7-tier1-g8-s0@24

Writes ``benchmarks/results/studies/heldout_fragility.{json,md}``.
"""

from __future__ import annotations

import argparse
import functools
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.learning import OUT, RESULTS, RUNS, WARM_ADAPTER, adapter_fingerprint
from lopd.evaluate import standard_error

STUDIES = RESULTS / "studies"

DISTILLATION = ("sdpo", "opsd", "sdft", "skill-sd")
"""Methods whose runs (no reward in the loss) ended below the warm start (RESULTS.md)."""
NEAR_TIE = 0.1
"""Nats: a decision at most this far from its runner-up counts as a near-tie."""


@functools.cache
def warm_fingerprint() -> str:
    """The committed warm start's fingerprint (hashing its weights once per process)."""
    return adapter_fingerprint(str(WARM_ADAPTER))


def committed_solved(bf16: bool) -> list[str]:
    """Held-out tasks the committed warm-start evaluation with these numerics solved."""
    data = json.loads((OUT / f"warm-start-s0-w{warm_fingerprint()}.json").read_text())
    per_task = data["suites"]["toolworld-test"]["per_task"] if bf16 else data["heldout"]["per_task"]
    return sorted(t for t, v in per_task.items() if v == 1.0)


def is_distillation(run: str) -> bool:
    """Whether a run name (``VARIANT-sSEED``) is one of the ``DISTILLATION`` methods'."""
    return run.startswith(tuple(f"{method}-" for method in DISTILLATION))


def lost_by(tasks: list[str]) -> dict[str, list[str]]:
    """task -> names of the committed runs (this warm start) that fail it."""
    warm = warm_fingerprint()
    out: dict[str, list[str]] = {t: [] for t in tasks}
    for path in sorted(OUT.glob(f"*-w{warm}.json")):
        data = json.loads(path.read_text())
        if data["rollouts"] == 0:
            continue
        for task in tasks:
            if data["heldout"]["per_task"].get(task, 1.0) == 0.0:
                out[task].append(path.stem.removesuffix(f"-w{warm}"))
    return out


def decisions(policy, trajectory, autocast: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced over one episode: (log p of each sampled token, log p of its best rival),
    both over the episode's sampled tokens only."""
    ids = torch.tensor([trajectory.input_ids])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = policy(input_ids=ids).logits[0, :-1].float()
    logp = torch.log_softmax(logits, dim=-1)
    targets = ids[0, 1:]
    sampled = torch.tensor(trajectory.action_mask[1:], dtype=torch.bool)
    chosen = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    rival = logp.scatter(-1, targets.unsqueeze(-1), float("-inf")).max(-1).values
    return chosen[sampled], rival[sampled]


def student_dir(name: str) -> Path:
    """``VARIANT-sSEED@STEP`` -> that run's checkpoint's student adapter."""
    run, step = name.split("@")
    path = RUNS / f"{run}-w{warm_fingerprint()}" / "checkpoints" / f"step-{int(step):06d}" / "student"
    if not path.is_dir():
        raise SystemExit(f"{name}: no student adapter at {path}")
    return path


def _mean_se(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.fmean(values):+.3f} +- {standard_error(values):.3f}"


def measure(args) -> dict:
    from lopd.envs import load_suite
    from lopd.evaluate import EvalSpec, _policy_backend, evaluate_tasks
    from lopd.models import resolve_dtype, setup_runtime
    from lopd.policy import load_policy
    from lopd.rollout import RolloutConfig

    setup_runtime(threads=args.threads, seed=0)
    spec = EvalSpec(init_adapter=str(WARM_ADAPTER), threads=args.threads)
    (backend, renderer, _), _ = _policy_backend(spec)
    autocast = backend.autocast
    solved = committed_solved(resolve_dtype("auto") == "bf16-autocast")
    wanted = set(solved)
    tasks = [t for t in load_suite("toolworld-test") if t.id in wanted]
    rollout = RolloutConfig(max_steps=args.turns, max_new_tokens=args.tokens, temperature=0.0)
    started = time.perf_counter()
    trajs = evaluate_tasks(backend, renderer, tasks, rollout, batch_size=len(tasks), seed=0)
    replay_s = time.perf_counter() - started
    losers = lost_by(solved)
    rows = {}
    for traj in trajs:
        chosen, rival = decisions(backend.model, traj, autocast)
        gaps = chosen - rival
        rows[traj.task.id] = {
            "replayed_success": bool(traj.success), "tier": traj.task.metadata.get("tier"),
            "sampled_tokens": int(gaps.numel()), "min_gap": float(gaps.min()),
            "near_ties": int((gaps < NEAR_TIE).sum()), "chosen": chosen, "lost_by": losers[traj.task.id],
            "students": {}}
    for name in args.students:
        policy, _ = load_policy("smollm2-135m", str(student_dir(name)), init_adapter=str(WARM_ADAPTER))
        for traj in trajs:
            chosen, rival = decisions(policy, traj, autocast)
            row = rows[traj.task.id]
            flips = (chosen < rival).nonzero()
            row["students"][name] = {
                "flips": int(flips.numel()),
                "first_flip": int(flips[0]) if flips.numel() else None,
                "shift": float((chosen - row["chosen"]).mean())}
        del policy
    for row in rows.values():
        del row["chosen"]
    return {"command": shlex.join([sys.executable, "-m", "benchmarks.studies.heldout_fragility",
                                   *sys.argv[1:]]),
            "replay_seconds": round(replay_s, 1), "turns": args.turns, "tokens": args.tokens,
            "students": args.students, "tasks": rows}


def report(result: dict, cpu: str) -> str:
    rows = result["tasks"]
    distill = {t: sum(map(is_distillation, r["lost_by"])) for t, r in rows.items()}
    runs = sorted({run for r in rows.values() for run in r["lost_by"] if is_distillation(run)})
    groups = [(label, [r for t, r in rows.items() if keep(distill[t])]) for label, keep in (
        ("lost by none of them", lambda k: k == 0), ("lost by 1-2", lambda k: 1 <= k <= 2),
        (f"lost by 3 or more of {len(runs)}", lambda k: k >= 3))]
    groups = [(label, members) for label, members in groups if members]
    lines = [
        "# Held-out fragility: how close the warm start's winning greedy decisions are", "",
        f"Command: `{result['command']}`", "",
        (f"The warm start replayed greedily ({result['turns']} turns x {result['tokens']} tokens) "
         f"on the {len(rows)} held-out ToolWorld tasks its committed evaluation solved "
         f"({sum(r['replayed_success'] for r in rows.values())} solved again in this replay, "
         f"{result['replay_seconds']:.0f} s). Closest decision: the smallest gap, over an "
         "episode's sampled tokens, between the chosen token's log-probability and its best "
         f"rival's (teacher-forced). Near-tie: a gap under {NEAR_TIE} nats. Tasks are grouped by "
         f"how many of these distillation runs lost them: {', '.join(runs)}."), "",
        "| tasks | n | closest decision, median (nats) | mean +- SE | episodes with a near-tie |",
        "|---|---|---|---|---|"]
    for label, members in groups:
        gaps = [r["min_gap"] for r in members]
        lines.append(f"| {label} | {len(members)} | {statistics.median(gaps):.3f} | "
                     f"{statistics.fmean(gaps):.3f} +- {standard_error(gaps):.3f} | "
                     f"{sum(r['near_ties'] > 0 for r in members)}/{len(members)} |")
    lines += ["", ("The same winning episodes teacher-forced through trained students: episodes "
                   "with at least one flipped argmax, and the mean shift of the chosen tokens' "
                   "log-probability (nats per token, +- SE over episodes):"), "",
              "| student (run@step) | " + " | ".join(label for label, _ in groups) + " |",
              "|---|" + "---|" * len(groups)]
    for s in result["students"]:
        cells = [f"{sum(r['students'][s]['flips'] > 0 for r in members)}/{len(members)}; "
                 + _mean_se([r["students"][s]["shift"] for r in members])
                 for _, members in groups]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines += ["", ("Per run: the closest decision of the tasks it lost against those it kept "
                   "(median, nats):"), "", "| run | lost | lost: median | kept: median |",
              "|---|---|---|---|"]
    for run in sorted({run for r in rows.values() for run in r["lost_by"]}):
        lost = [r["min_gap"] for r in rows.values() if run in r["lost_by"]]
        kept = [r["min_gap"] for r in rows.values() if run not in r["lost_by"]]
        lines.append(f"| {run} | {len(lost)}/{len(rows)} | {statistics.median(lost):.3f} | "
                     f"{statistics.median(kept):.3f} |")
    lines += ["", f"CPU: {cpu}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.bench_throughput import cpu_line

    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.heldout_fragility",
                                description=__doc__.split("\n")[0])
    p.add_argument("--students", default="", help="comma-separated VARIANT-sSEED@STEP checkpoints "
                   "of the learning sweep to teacher-force the warm start's episodes through")
    p.add_argument("--turns", type=int, default=6, help="turns per episode (the sweep's held-out)")
    p.add_argument("--tokens", type=int, default=96, help="new tokens per turn")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--name", default="heldout_fragility", help="results file stem")
    p.add_argument("--rewrite", action="store_true",
                   help="only rewrite NAME.md from the committed NAME.json")
    args = p.parse_args(argv)
    args.students = [s for s in args.students.split(",") if s]
    if args.rewrite:
        result = json.loads((STUDIES / f"{args.name}.json").read_text())
        cpu = result["cpu"]
    else:
        result, cpu = measure(args), cpu_line()
        (STUDIES / f"{args.name}.json").write_text(json.dumps({**result, "cpu": cpu}, indent=1)
                                                   + "\n")
    text = report(result, cpu)
    (STUDIES / f"{args.name}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
