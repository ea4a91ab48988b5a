"""How the demo's turn and token caps set its held-out evaluation time, and what they change.

`make demo` evaluates the warm start on 100 held-out ToolWorld tasks (tiers 1-2, greedy) before
and after training, and those two evaluations are about a third of its wall time. A tier-1 task is
solved in 2 turns and a tier-2 task in 3, so failed episodes, which run to the cap, are what a
lower cap shortens; a batch of greedy episodes decodes each turn until its longest response
stops, so a failed episode that rambles to the token cap sets every turn's length, and the
token cap is the other lever. This benchmark evaluates the same student (the committed warm
start, or ``--adapter``) at each cap (``TURNSxTOKENS``) in one process, interleaved, and reports
seconds per evaluation, success, and how many tasks change outcome against the first cap.

    .venv/bin/python -m benchmarks.studies.bench_demo_eval --caps 4x96,3x96,3x64 --dtype fp32

Writes ``benchmarks/results/demo_eval_turns.md`` (with `lopd info`'s CPU line).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results" / "demo_eval_turns.md"


def parse_caps(text: str) -> list[tuple[int, int]]:
    """``"4x96,3x64"`` -> [(4, 96), (3, 64)]: (turns, new tokens per turn) per evaluation."""
    caps = []
    for item in text.split(","):
        turns, _, tokens = item.strip().partition("x")
        if not (turns.isdigit() and tokens.isdigit() and int(turns) > 0 and int(tokens) > 0):
            raise ValueError(f"--caps: {item!r} is not TURNSxTOKENS (for example 3x96)")
        caps.append((int(turns), int(tokens)))
    return caps


def measure(caps: list[tuple[int, int]], dtype: str, repeats: int, adapter: str,
            threads: int = 2) -> list[dict]:
    """Evaluate one trainer's student at each cap, ``repeats`` rounds in the given order."""
    from lopd.demo import WARM_START, demo_config
    from lopd.trainer import Trainer

    config = demo_config(Path("runs/bench_demo_eval"), quick=False, dtype=dtype)
    config.model.init_adapter = "" if adapter == "none" else (adapter or str(WARM_START))
    config.run.tensorboard = False
    config.run.threads = threads
    trainer = Trainer(config)
    rows = []
    for round_ in range(repeats):
        for turns, tokens in caps:
            trainer.config.rollout.max_steps = turns
            trainer.config.rollout.eval_max_new_tokens = tokens  # the demo's own cap is set there
            start = time.perf_counter()
            summary = trainer.evaluate()
            rows.append({"round": round_, "turns": turns, "tokens": tokens,
                         "seconds": time.perf_counter() - start,
                         "success": summary["success"], "se": summary["success_se"],
                         "per_task": summary["per_task"], "n": summary["n"]})
            print(f"{turns} turns x {tokens} tokens: {rows[-1]['seconds']:.1f} s, success {summary['success']:.3f}")
    return rows


def write(rows: list[dict], dtype: str, command: str) -> Path:
    from benchmarks.bench_throughput import cpu_line

    first = rows[0]
    lines = ["# Demo held-out evaluation: time and score by turn and token cap", "",
             f"`{command}`", "",
             f"CPU: {cpu_line()}; dtype {dtype}.", "",
             "| round | turns | tokens per turn | tasks | seconds | success +- SE | tasks whose outcome differs from the first row |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        differs = sum(row["per_task"][task] != won for task, won in first["per_task"].items())
        lines.append(f"| {row['round']} | {row['turns']} | {row['tokens']} | {row['n']} | {row['seconds']:.1f} | "
                     f"{row['success']:.3f} +- {row['se']:.3f} | {differs} |")
    RESULTS.write_text("\n".join(lines) + "\n")
    return RESULTS


def main() -> None:
    import sys

    from lopd.cli import DTYPES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--caps", default="4x96,3x96,3x64",
                        help="comma-separated TURNSxTOKENS caps (turns per episode x new tokens per turn)")
    parser.add_argument("--dtype", default="auto", choices=DTYPES, help="model.dtype (fp32 = what a CPU without fast bf16 runs)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the demo uses 2)")
    parser.add_argument("--adapter", default="", help="student adapter (default: the committed warm start; none: the base model)")
    args = parser.parse_args()
    try:
        caps = parse_caps(args.caps)
    except ValueError as error:
        parser.error(str(error))
    rows = measure(caps, args.dtype, args.repeats, args.adapter, args.threads)
    print(write(rows, args.dtype, "python -m benchmarks.studies.bench_demo_eval " + " ".join(sys.argv[1:])))


if __name__ == "__main__":
    main()
