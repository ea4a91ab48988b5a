"""Command line of ``benchmarks/bench_trl.py``: the parent run (both sides), or one child.

The parent runs each side in its own subprocess (this same script with ``--child``) and writes
the results; the hidden ``--child``/``--result-file``/``--workdir`` options are how it tells a
child which side to run and where to put its measurements.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchmarks.trl_bench.child import child_main
from benchmarks.trl_bench.common import BENCH_SITE, RESULTS, TRL_INSTALL
from benchmarks.trl_bench.parent import run_child
from benchmarks.trl_bench.report import write_results


def build_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--method", choices=("grpo", "sdft"), default="grpo")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--prompts", type=int, default=4, help="prompts (tasks) per step")
    parser.add_argument("--generations", type=int, default=4, help="completions per prompt")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--experience-chars", type=int, default=600,
                        help="SDFT demo clip (lopd's method.experience_chars)")
    parser.add_argument("--sides", default="lopd,trl", help="which sides to run, in order")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--child", choices=("lopd", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    return parser


def main(description: str) -> None:
    """``description``: the first line of ``bench_trl.py``'s docstring (the --help title)."""
    args = build_parser(description).parse_args()
    if args.child:
        child_main(args)
        return
    if not BENCH_SITE.is_dir():
        raise SystemExit(f"TRL is not installed for the benchmark; run: {TRL_INSTALL}")
    command = "flock /tmp/lopd-cpu.lock .venv/bin/python benchmarks/bench_trl.py " + " ".join(
        sys.argv[1:])
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-trl-") as tmp:
        for side in args.sides.split(","):
            results[side] = run_child(side, args, Path(tmp))
    write_results(args, Path(args.out), results.get("lopd", {"error": "not run"}),
                  results.get("trl", {"error": "not run"}), command)
