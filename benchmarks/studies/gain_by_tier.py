"""Where GRPO's held-out gain lies: the learning sweep's GRPO runs, paired against their warm
start on tier-1 held-out tasks (the training distribution: ``data.train_max_tier=1``), tiers
1-2 and all 200, at every committed point of each run's curve.

The demo has to show a paired gain of 2 standard errors on 100 or more held-out tasks. The
paired SE is set by how many tasks change outcome, so a gain shows sooner where the training
moves tasks one way. This reads only committed results (``benchmarks/results/learning/``,
per-task success) and runs nothing:

    .venv/bin/python -m benchmarks.studies.gain_by_tier

Writes ``benchmarks/results/studies/gain_by_tier.{json,md}``.
"""

from __future__ import annotations

import json

from benchmarks.learning import OUT as SWEEP
from benchmarks.learning import RESULTS
from lopd.envs.toolworld import load_tasks
from lopd.evaluate import paired_gain

WARM = SWEEP / "warm-start-s0-w890b506a3967.json"
RUNS = "grpo-lr5e-4-t0.7-tier1-g8*-w890b506a3967.json"
SUBSETS = (("tier 1", lambda tier: tier == 1), ("tiers 1-2", lambda tier: tier <= 2),
           ("all", lambda tier: True))


def curve_points(run: dict) -> list[tuple[int, dict[str, float]]]:
    """(rollouts, per-task success) at each evaluated point and at the end."""
    points = [(p["rollouts"], p["per_task"]) for p in run.get("curve", [])]
    return points + [(run["rollouts"], run["heldout"]["per_task"])]


def run_label(run: dict) -> str:
    """The run's numerics and sampler: fp32 or bf16 autocast, vLLM or the HF loop."""
    fp32 = "model.dtype=fp32" in run["overrides"] or "runs fp32" in run["cpu"]
    engine = "vLLM" if "rollout.backend=vllm" in run["overrides"] else "HF loop"
    return f"{'fp32' if fp32 else 'bf16'}, {engine}"


def flips(after: dict[str, float], before: dict[str, float], ids: list[str]) -> int:
    return sum(1 for t in ids if after[t] != before[t])


def rows(warm: dict[str, float], tiers: dict[str, int]) -> list[dict]:
    out = []
    for path in sorted(SWEEP.glob(RUNS)):
        run = json.loads(path.read_text())
        for rollouts, per_task in curve_points(run):
            row = {"run": f"{run_label(run)}, seed {run['seed']}", "rollouts": rollouts,
                   "cpu": run["cpu"]}
            for name, keep in SUBSETS:
                ids = sorted(t for t in per_task if keep(tiers[t]))
                gain, se, n = paired_gain({t: per_task[t] for t in ids}, warm)
                row[name] = {"n": n, "gain": gain, "se": se, "changed": flips(per_task, warm, ids)}
            out.append(row)
    return out


def markdown(table: list[dict]) -> str:
    head = "| run | rollouts | " + " | ".join(f"{name}: gain +- SE (changed)" for name, _ in SUBSETS)
    lines = [head + " |", "|---|---|" + "---|" * len(SUBSETS)]
    for row in table:
        cells = [f"{row[n]['gain']:+.3f} +- {row[n]['se']:.3f} ({row[n]['changed']})"
                 for n, _ in SUBSETS]
        lines.append(f"| {row['run']} | {row['rollouts']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    warm = json.loads(WARM.read_text())["heldout"]["per_task"]
    tiers = {t.id: int(t.metadata["tier"]) for t in load_tasks("test")}
    table = rows(warm, tiers)
    n = {name: table[0][name]["n"] for name, _ in SUBSETS}
    out = RESULTS / "studies"
    (out / "gain_by_tier.json").write_text(json.dumps({"warm_start": WARM.name, "rows": table},
                                                      indent=1) + "\n")
    text = (f"# GRPO's held-out gain by tier\n\n`python -m benchmarks.studies.gain_by_tier`: the "
            f"learning sweep's GRPO runs (LoRA lr 5e-4, temperature 0.7, tier-1 training tasks, "
            f"4 tasks x 8 rollouts), paired against the warm start's greedy evaluation "
            f"(`{WARM.name}`, fp32) on the same held-out tasks: tier 1 (n = {n['tier 1']}), "
            f"tiers 1-2 ({n['tiers 1-2']}), all ({n['all']}). In brackets: tasks that changed "
            f"outcome. Each run's CPU and dtype are in `gain_by_tier.json`.\n\n"
            + markdown(table) + "\n")
    (out / "gain_by_tier.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
