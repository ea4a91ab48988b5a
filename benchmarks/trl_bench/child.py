"""Entry point of one side's child process (``bench_trl.py --child lopd|trl``).

Each side runs in a fresh process so that its peak RSS and CPU time are its own; the child
writes its measurements, plus those process-wide numbers, to the file the parent reads.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from benchmarks.trl_bench.common import cpu_seconds, peak_rss_mb
from benchmarks.trl_bench.lopd_side import run_lopd
from benchmarks.trl_bench.trl_side import run_trl


def child_main(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    result = run_lopd(args) if args.child == "lopd" else run_trl(args)
    result.update(peak_rss_mb=round(peak_rss_mb(), 1), pid=os.getpid(),
                  process_cpu_seconds=round(cpu_seconds(), 1))
    Path(args.result_file).write_text(json.dumps(result, indent=2))
