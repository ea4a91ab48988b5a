"""Peak memory of a training step, phase by phase: where LOPD's extra RSS over GRPO comes from.

One LOPD trainer and one GRPO trainer (same model, same LoRA warm start) are built; one batch
of rollouts is generated once and re-used, as in ``bench_step.py``. Each phase is measured
alone: freed heap is handed back to the OS (``malloc_trim``), Linux's peak-RSS counter VmHWM is
reset to the current RSS (``/proc/self/clear_refs``), the phase runs, and the report gives the
phase's peak RSS and its rise over the RSS it started from. The rest of the step (privileged
context + update, optimiser included) is measured for GRPO and for LOPD with
``optim.composer_recompute`` off and on, for each ``optim.micro_batch`` of ``--micro-batches``;
the cold start's own step is measured with forwards of 4 examples and of 1 (its default).

    .venv/bin/python benchmarks/bench_memory.py [--model smollm2-135m] [--adapter runs/sft/adapter]

Writes benchmarks/results/memory.{json,md}. Linux only (VmHWM); CPU memory only.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_step import batch_arguments, build  # same trainer settings as the step-time benchmark

RESULTS = Path(__file__).parent / "results"


def _status_mb(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


def measure(phase: Callable[[], object]) -> tuple[object, dict]:
    """Run ``phase``; its peak RSS (MB) and the rise over the RSS it started from."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
    start = _status_mb("VmRSS")
    started = time.perf_counter()
    value = phase()
    peak = _status_mb("VmHWM")
    return value, {"start_mb": round(start), "peak_mb": round(peak),
                   "rise_mb": round(peak - start), "seconds": round(time.perf_counter() - started, 1)}


def rest_of_step(trainer, trajs, recompute: bool | None = None):
    """Privileged context + update (optimiser step included) on ``trajs``."""
    if recompute is not None:
        trainer.config.optim.composer_recompute = recompute
    name = trainer.config.method.name
    return lambda: trainer.update(trajs, trainer.rt.context(trajs, 0) if name != "grpo" else None,
                                  {})


def cold_start_steps(trainer, args, micro_batch: int):
    """``args.cold_start_steps`` steps of the runtime's cold start (batches of 4 examples)."""
    from lopd.coldstart import cold_start
    from lopd.method_parts import cold_start_examples

    rt = trainer.rt
    examples = cold_start_examples(rt)
    return lambda: cold_start(rt.composer, rt.model, rt.tokenizer, examples,
                              args.cold_start_steps, batch_size=4, evaluate=False,
                              teacher_model=rt.teacher_model, dtype=rt.dtype,
                              micro_batch=micro_batch)


def checkpointed_phases(lopd, grpo, trajs, args) -> dict[str, list[dict]]:
    """The cold start and the update again with ``optim.activation_checkpointing`` on."""
    from lopd.models import enable_activation_checkpointing

    phases = {}
    for trainer in (lopd, grpo):
        enable_activation_checkpointing(trainer.rt.model)
        trainer.config.optim.activation_checkpointing = True
    run = cold_start_steps(lopd, args, 1)

    def cold() -> None:
        with lopd.rt.checkpointing():
            run()

    _, sample = measure(cold)
    phases[f"cold start, {args.cold_start_steps} steps, micro-batch 1, activation "
           "checkpointing"] = [sample]
    micro_batch = args.micro_batches[0]
    for label, (trainer, recompute) in {"GRPO": (grpo, None), "LOPD": (lopd, True)}.items():
        trainer.config.optim.micro_batch = micro_batch
        _, sample = measure(rest_of_step(trainer, trajs, recompute))
        phases[f"context + update, micro-batch {micro_batch}, activation checkpointing: "
               f"{label}"] = [sample]
    return phases


def main() -> None:
    parser = batch_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--micro-batches", default="4,2,1",
                        help="optim.micro_batch values for the update (the first builds)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--checkpointing", action="store_true",
                        help="also measure with optim.activation_checkpointing (last)")
    parser.add_argument("--name", default="memory", help="results file stem")
    parser.add_argument("--results-dir", default=str(RESULTS))
    args = parser.parse_args()
    args.device, args.dtype = "cpu", "auto"
    args.micro_batches = [int(v) for v in args.micro_batches.split(",")]
    args.micro_batch = args.micro_batches[0]
    phases: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        (lopd, _), phases["LOPD setup (model, bank seeding, composer cold start)"] = measure(
            lambda: build("lopd", args, Path(tmp)))
        for micro_batch in (4, 1):
            _, phases[f"cold start, {args.cold_start_steps} steps of 4 examples, micro-batch "
                      f"{micro_batch}"] = measure(cold_start_steps(lopd, args, micro_batch))
        trajs, phases["generate (shared batch)"] = measure(
            lambda: lopd.rt.rollout(lopd.sample_tasks(0), 0))
        lopd.rt.update_bank(trajs, 0)
        (grpo, _), _ = measure(lambda: build("grpo", args, Path(tmp)))
        for _ in range(args.repeats):
            for micro_batch in args.micro_batches:
                rows = {"GRPO": (grpo, None), "LOPD, composer recomputed (default)": (lopd, True)}
                if micro_batch == args.micro_batches[0]:
                    rows["LOPD, composer graph kept"] = (lopd, False)
                for label, (trainer, recompute) in rows.items():
                    trainer.config.optim.micro_batch = micro_batch
                    _, sample = measure(rest_of_step(trainer, trajs, recompute))
                    phases.setdefault(f"context + update, micro-batch {micro_batch}: {label}",
                                      []).append(sample)
        if args.checkpointing:
            phases.update(checkpointed_phases(lopd, grpo, trajs, args))
    result = {"args": vars(args), "command": "python " + " ".join(map(shlex.quote, sys.argv)),
              "tokens": sum(len(t.input_ids) for t in trajs),
              "action_tokens": sum(sum(t.action_mask) for t in trajs),
              "phases": {k: v if isinstance(v, list) else [v] for k, v in phases.items()}}
    out = Path(args.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(result, indent=2))
    (out / f"{args.name}.md").write_text(report(result))
    print(report(result))


def report(result: dict) -> str:
    args = result["args"]
    lines = [
        "# Peak memory per phase (CPU RSS)", "",
        f"Command: `{result['command']}`", "",
        (f"Model {args['model']} (warm start `{args['adapter']}`), {args['dtype']}, "
         f"{args['threads']} threads; one batch of {args['tasks']} tasks x {args['group']} "
         f"rollouts ({result['tokens']} tokens, {result['action_tokens']} action tokens). Peak = "
         "VmHWM after a reset at the phase's start; rise = peak - RSS at the start (median over "
         "repeats)."), "",
        "| phase | repeats | RSS at start MB | peak MB | rise MB | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for phase, samples in result["phases"].items():
        med = {k: statistics.median(s[k] for s in samples)
               for k in ("start_mb", "peak_mb", "rise_mb", "seconds")}
        lines.append(f"| {phase} | {len(samples)} | {med['start_mb']:.0f} | {med['peak_mb']:.0f} "
                     f"| {med['rise_mb']:.0f} | {med['seconds']:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
