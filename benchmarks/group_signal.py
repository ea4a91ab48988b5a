"""How much GRPO signal a policy's rollouts carry: per-task success rates at a sampling
temperature, and the share of groups of G rollouts with a mixed outcome (a group whose
rollouts all score the same has zero advantage and no gradient).

    .venv/bin/python -m benchmarks.group_signal --tier 1 --tasks 24 --samples 8 --turns 3

Plays ``--samples`` episodes of each of the first ``--tasks`` ToolWorld training tasks of a
tier with the committed warm start (``benchmarks/results/learning/warm-start-adapter``) and
prints the rates and P(mixed group) = 1 - p^G - (1 - p)^G averaged over tasks, for G = 4, 8.
"""

from __future__ import annotations

import argparse
import time

from benchmarks.learning import WARM_ADAPTER


def mixed_share(rates: list[float], group: int) -> float:
    """Expected share of groups of ``group`` rollouts whose rewards are not all equal."""
    return sum(1 - p ** group - (1 - p) ** group for p in rates) / len(rates)


def main(argv: list[str] | None = None) -> int:
    from lopd.envs.toolworld import load_tasks
    from lopd.evaluate import EvalSpec, _policy_backend, evaluate_tasks, summarize
    from lopd.models import setup_runtime
    from lopd.rollout import RolloutConfig

    p = argparse.ArgumentParser(prog="python -m benchmarks.group_signal", description=__doc__.split("\n")[0])
    p.add_argument("--tier", type=int, default=1)
    p.add_argument("--tasks", type=int, default=24)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--adapter", default="", help="a trained student adapter on the warm start")
    args = p.parse_args(argv)
    setup_runtime(threads=2, seed=0)
    spec = EvalSpec(init_adapter=str(WARM_ADAPTER), adapter=args.adapter)
    (backend, renderer, _), _ = _policy_backend(spec)
    tasks = [t for t in load_tasks("train") if t.metadata["tier"] == args.tier][:args.tasks]
    started = time.time()
    rollout = RolloutConfig(max_steps=args.turns, max_new_tokens=96, temperature=args.temperature)
    trajs = evaluate_tasks(backend, renderer, [t for t in tasks for _ in range(args.samples)],
                           rollout, batch_size=32, seed=1)
    rates = sorted(summarize(trajs)["per_task"].values())
    print(f"tier {args.tier}, {len(tasks)} tasks x {args.samples}, temperature "
          f"{args.temperature}, {args.turns} turns: {time.time() - started:.0f} s")
    print(f"mean success {sum(rates) / len(rates):.3f}; per task {rates}")
    for group in (4, 8):
        print(f"P(mixed group), G = {group}: {mixed_share(rates, group):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
