"""The parent process of the lopd-vs-TRL benchmark: run each side's child and summarise it.

The parent measures what it can only see from outside a child (wall time, load average, and how
many cores other processes used meanwhile, since the machine is shared), reads the child's
per-step records and adds the medians the report compares. It also describes the machine and
the library versions for the results.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.trl_bench.common import BENCH_SITE, ROOT, SCRIPT

# The arguments a child gets from the parent's command line, as --key value.
CHILD_ARGS = ("method", "model", "steps", "warmup", "prompts", "generations", "micro_batch",
              "max_new_tokens", "threads", "lr", "experience_chars")


def machine() -> dict:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory": mem, "python": platform.python_version()}


def versions() -> dict:
    import accelerate
    import peft
    import torch
    import transformers

    out = {"torch": torch.__version__, "transformers": transformers.__version__,
           "peft": peft.__version__, "accelerate": accelerate.__version__}
    for name in ("trl", "datasets"):
        dist = next(BENCH_SITE.glob(f"{name}-*.dist-info"), None)
        out[name] = dist.name[len(name) + 1:-len(".dist-info")] if dist else "not installed"
    return out


def busy_cpu_seconds() -> float:
    """Machine-wide busy CPU seconds so far (all cores, from /proc/stat)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")  # user nice system irq softirq steal


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def child_command(side: str, args, workdir: Path, result_file: Path) -> list[str]:
    cmd = [sys.executable, str(SCRIPT), "--child", side,
           "--result-file", str(result_file), "--workdir", str(workdir / side)]
    for key in CHILD_ARGS:
        cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    return cmd


def child_env(args) -> dict:
    """The child's environment: ``args.threads`` for OpenMP/MKL, and offline Hugging Face."""
    return dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
                HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                HF_DATASETS_OFFLINE="1")


def step_summary(steps: list[dict]) -> dict:
    """Medians (and per-step lists) over the timed, non-warm-up steps."""
    timed = [s for s in steps if not s["warmup"]]
    seconds = [s["seconds"] for s in timed]
    return {
        "median_seconds": round(statistics.median(seconds), 2),
        "seconds_each": seconds,
        "median_cpu_seconds": round(statistics.median(s["cpu_seconds"] for s in timed), 2),
        "median_seconds_excluding_generate": round(statistics.median(
            s["seconds"] - s["split"].get("generate", 0.0) for s in timed), 2),
        "tokens_generated_each": [s["tokens_generated"] for s in timed],
        "median_seconds_per_1k_tokens": round(statistics.median(
            1000 * s["seconds"] / max(s["tokens_generated"], 1) for s in timed), 2),
        "split_median": {k: round(statistics.median(s["split"].get(k, 0.0) for s in timed), 2)
                         for k in sorted({k for s in timed for k in s["split"]})},
    }


def run_child(side: str, args, workdir: Path) -> dict:
    """Run one side's child; its result with the machine load meanwhile and a step summary
    (or an ``error`` entry if the child failed)."""
    result_file = workdir / f"{side}.json"
    cmd = child_command(side, args, workdir, result_file)
    env = child_env(args)
    load_before = os.getloadavg()
    busy_before, child_before = busy_cpu_seconds(), children_cpu_seconds()
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, check=False)
    elapsed = time.perf_counter() - started
    # What the rest of the machine used meanwhile: all CPU time minus this side's own.
    others = (busy_cpu_seconds() - busy_before - (children_cpu_seconds() - child_before)) / elapsed
    load = {"wall_seconds": round(elapsed, 1), "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "other_processes_cores": round(max(others, 0.0), 2)}
    if proc.returncode != 0:
        return {"error": f"{side} child exited with {proc.returncode}", **load}
    result = json.loads(result_file.read_text())
    result.update(load)
    result["summary"] = step_summary(result["steps"])
    return result
