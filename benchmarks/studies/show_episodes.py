"""Greedy held-out episodes of a run's newest student, printed turn by turn: what a trained
policy does on one domain's tasks (the demo's study used it to find the learnt cancel).

    .venv/bin/python -m benchmarks.studies.show_episodes runs/demo/grpo --domain travel --n 4
"""

from __future__ import annotations

import argparse


def main() -> None:
    from lopd.envs import load_suite
    from lopd.evaluate import EvalSpec, _policy_backend, evaluate_tasks
    from lopd.models import setup_runtime
    from lopd.rollout import RolloutConfig

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="run directory (its newest checkpoint is played)")
    p.add_argument("--suite", default="toolworld-test-tier1")
    p.add_argument("--domain", default="travel")
    p.add_argument("--n", type=int, default=4, help="tasks of the domain, in suite order")
    p.add_argument("--max-steps", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args()
    setup_runtime(seed=0)
    spec = EvalSpec(run=args.run, suites=[args.suite], backend="hf")
    (backend, renderer, _), _ = _policy_backend(spec)
    tasks = [t for t in load_suite(args.suite) if t.domain == args.domain][:args.n]
    rollout = RolloutConfig(max_steps=args.max_steps, max_new_tokens=args.max_new_tokens,
                            temperature=0.0)  # greedy, as the held-out evaluation
    for traj in evaluate_tasks(backend, renderer, tasks, rollout, batch_size=len(tasks) or 1):
        print(f"== {traj.task.id}: {traj.task.prompt} (reward {traj.reward:g})")
        for message in traj.messages[2:]:
            print(f"   {message['role']:9} {message['content'][:200]}")


if __name__ == "__main__":
    main()
