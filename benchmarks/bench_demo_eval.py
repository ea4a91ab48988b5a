"""How the demo's turn cap sets its held-out evaluation time, and what it changes in the score.

`make demo` evaluates the warm start on 100 held-out ToolWorld tasks (tiers 1-2, greedy) before
and after training, and those two evaluations are about a third of its wall time. A tier-1 task is
solved in 2 turns and a tier-2 task in 3, so failed episodes, which run to the cap, are what a
lower cap shortens. This benchmark evaluates the same student (the committed warm start, or
``--adapter``) at each cap in one process, interleaved, and reports seconds per evaluation,
success, and how many tasks change outcome against the first cap.

    .venv/bin/python -m benchmarks.bench_demo_eval --turns 4,3 --dtype fp32 --repeats 1

Writes ``benchmarks/results/demo_eval_turns.md`` (with `lopd info`'s CPU line).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "demo_eval_turns.md"


def measure(turns: list[int], dtype: str, repeats: int, adapter: str) -> list[dict]:
    """Evaluate one trainer's student at each turn cap, ``repeats`` rounds in turn order."""
    from lopd.demo import WARM_START, demo_config
    from lopd.trainer import Trainer

    config = demo_config(Path("runs/bench_demo_eval"), quick=False, dtype=dtype)
    config.model.init_adapter = "" if adapter == "none" else (adapter or str(WARM_START))
    config.run.tensorboard = False
    trainer = Trainer(config)
    rows = []
    for round_ in range(repeats):
        for cap in turns:
            trainer.config.rollout.max_steps = cap
            start = time.perf_counter()
            summary = trainer.evaluate()
            rows.append({"round": round_, "turns": cap, "seconds": time.perf_counter() - start,
                         "success": summary["success"], "se": summary["success_se"],
                         "per_task": summary["per_task"], "n": summary["n"]})
            print(f"turns {cap}: {rows[-1]['seconds']:.1f} s, success {summary['success']:.3f}")
    return rows


def write(rows: list[dict], dtype: str, command: str) -> Path:
    from benchmarks.bench_throughput import cpu_line

    first = rows[0]
    lines = ["# Demo held-out evaluation: time and score by turn cap", "",
             f"`{command}`", "",
             f"CPU: {cpu_line()}; dtype {dtype}.", "",
             "| round | turn cap | tasks | seconds | success +- SE | tasks whose outcome differs from the first row |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        differs = sum(row["per_task"][task] != won for task, won in first["per_task"].items())
        lines.append(f"| {row['round']} | {row['turns']} | {row['n']} | {row['seconds']:.1f} | "
                     f"{row['success']:.3f} +- {row['se']:.3f} | {differs} |")
    RESULTS.write_text("\n".join(lines) + "\n")
    return RESULTS


def main() -> None:
    import sys

    from lopd.cli import DTYPES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default="4,3", help="comma-separated turn caps")
    parser.add_argument("--dtype", default="auto", choices=DTYPES, help="model.dtype (fp32 = what a CPU without fast bf16 runs)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--adapter", default="", help="student adapter (default: the committed warm start; none: the base model)")
    args = parser.parse_args()
    rows = measure([int(t) for t in args.turns.split(",")], args.dtype, args.repeats, args.adapter)
    print(write(rows, args.dtype, "python -m benchmarks.bench_demo_eval " + " ".join(sys.argv[1:])))


if __name__ == "__main__":
    main()
