"""SFT warm-start step time: mixed batches vs one-domain batches, with and without the shared
system prompt (``lopd.sft``), on the real SmolLM2-135M, interleaved in one run.

Each repeat draws one mixed batch and one one-domain batch (same seed for every repeat
index) and times forward + backward of ``sft_loss`` for: mixed (no prefix to share), one
domain without sharing, one domain with sharing. The medians are reported with the tokens
each variant actually runs.

    .venv/bin/python benchmarks/bench_sft.py [--repeats 3] [--batch-size 4] [--threads 2]

Writes benchmarks/results/sft_step.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch

from lopd.chat import ChatRenderer
from lopd.envs import load_suite
from lopd.models import LoraSpec, add_adapter, load_model, setup_runtime
from lopd.reference import reference_trajectory
from lopd.sft import sft_loss, shared_prefix_lens

RESULTS = Path(__file__).parent / "results"


def timed_step(student, rows, pad_id: int, share: bool) -> float:
    student.zero_grad(set_to_none=True)
    started = time.perf_counter()
    sft_loss(student, rows, pad_id, share_prefix=share).backward()
    return time.perf_counter() - started


def tokens_run(rows, share: bool) -> int:
    """Token positions the forward computes: shared prefixes count once per domain."""
    total = sum(len(t.input_ids) for t in rows)
    if not share:
        return total
    seen, lengths = set(), shared_prefix_lens(rows)
    for traj, length in zip(rows, lengths):
        key = (traj.task.domain, length)
        if key in seen:
            total -= length
        seen.add(key)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    setup_runtime(threads=args.threads, seed=0)
    base, tokenizer = load_model("smollm2-135m", dtype="fp32", device="cpu")
    student = add_adapter(base, "default", LoraSpec(r=16, alpha=32))
    student.train()
    renderer = ChatRenderer(tokenizer)
    data = [reference_trajectory(t, renderer)
            for t in load_suite("toolworld-train", n=400) if t.reference]
    by_domain: dict[str, list] = {}
    for traj in data:
        by_domain.setdefault(traj.task.domain, []).append(traj)
    times: dict[str, list[float]] = {"mixed": [], "one domain": [], "one domain, shared": []}
    tokens: dict[str, list[int]] = {k: [] for k in times}
    for repeat in range(args.repeats):
        rng = random.Random(repeat)
        mixed = rng.sample(data, args.batch_size)
        domain = by_domain[rng.choice(sorted(by_domain))]
        one = rng.sample(domain, args.batch_size)
        for name, rows, share in (("mixed", mixed, False), ("one domain", one, False),
                                  ("one domain, shared", one, True)):
            times[name].append(timed_step(student, rows, tokenizer.pad_token_id, share))
            tokens[name].append(tokens_run(rows, share))
    result = {"args": vars(args), "torch_threads": torch.get_num_threads(),
              "seconds": {k: [round(v, 2) for v in vs] for k, vs in times.items()},
              "median_s": {k: round(statistics.median(vs), 2) for k, vs in times.items()},
              "tokens_run": tokens}
    base_s = result["median_s"]["mixed"]
    lines = ["# SFT step: mixed vs one-domain batches", "",
             (f"`.venv/bin/python benchmarks/bench_sft.py --repeats {args.repeats} --batch-size "
             f"{args.batch_size} --threads {args.threads}`"), "",
             (f"SmolLM2-135M + LoRA r16, fp32, CPU, {args.threads} threads; forward + backward "
             f"of `sft_loss` on {args.batch_size} ToolWorld reference trajectories; median of "
             f"{args.repeats} interleaved repeats."), "",
             "| batch | median s | each repeat (s) | tokens run per repeat | vs mixed |",
             "|---|---|---|---|---|"]
    for name in times:
        lines.append(f"| {name} | {result['median_s'][name]:.1f} | {result['seconds'][name]} | "
                     f"{tokens[name]} | {base_s / result['median_s'][name]:.2f}x |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sft_step.json").write_text(json.dumps(result, indent=2))
    (RESULTS / "sft_step.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
