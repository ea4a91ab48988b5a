"""Build a learning variant's cold-start cache (seeded bank + phi_0) without training.

The learning sweep builds it on a LOPD run's first start (``benchmarks.experiments.runner``,
``ensure_cache``); building it alone lets ``benchmarks.teacher_privilege --from-run DIR`` check
the teacher's privilege at phi_0 *before* the long run, which then finds the cache and skips
the cold start:

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.studies.coldstart_cache --rules \\
        --variant lopd-lr2e-4-t0.7-tier1-g8-diverse \\
        --init-adapter benchmarks/results/rules/icl-warm-start-adapter --threads 1

Prints the cache directory.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import learning
from benchmarks.experiments.runner import ensure_cache
from benchmarks.learning_variants import VARIANTS


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.coldstart_cache",
                                description=__doc__.splitlines()[0])
    p.add_argument("--variant", required=True, choices=sorted(VARIANTS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rules", action="store_true", help="the business-rules suites")
    p.add_argument("--init-adapter", default=str(learning.WARM_ADAPTER.relative_to(learning.REPO)))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--set", action="append", default=[], metavar="section.field=value")
    args = p.parse_args(argv)
    if args.rules:
        learning.use_rules_suites()
    args.runs, args.checkpoint_every, args.eval_tasks, args.eval_batch = (
        str(learning.RUNS), 8, 0, 100)
    from lopd.config import load_config

    job = learning.job(args.variant, args.seed, 24, args, args.threads)
    directory = ensure_cache(load_config(job.base, job.overrides), Path(job.cache_root))
    print(directory)
    return directory


if __name__ == "__main__":
    main()
