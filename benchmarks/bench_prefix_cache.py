"""Cross-turn prefix reuse in HFBackend: the same greedy ToolWorld episodes with it on and off.

With ``prefix_cache=True`` each round prefills only what is new since the previous round (the
last sampled token, the turn closing, the tool result and the next turn header) instead of the
whole conversation. Both runs use the same model, dtype, thread count and episodes; reported:
wall time, new (sampled) tokens/s, prompt tokens prefilled vs reused, time per round, and
whether the trajectories (token ids) are identical.

    .venv/bin/python benchmarks/bench_prefix_cache.py [--tasks 8] [--threads 1] \
        [--adapter runs/sft/adapter]

The vanilla model rarely calls a tool, so its episodes end after one round; ``--adapter`` adds
a run with a tool-calling adapter (merged), whose episodes last several rounds.

Writes benchmarks/results/prefix_cache.json and prefix_cache.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

from lopd.chat import ChatRenderer
from lopd.envs import load_suite, make_env
from lopd.generation import HFBackend
from lopd.models import setup_runtime
from lopd.rollout import RolloutConfig, run_episodes

RESULTS = Path(__file__).parent / "results"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class TimedBackend:
    """Wraps a backend to time every generate() call (one call per rollout round)."""

    def __init__(self, backend):
        self.backend, self.round_seconds = backend, []

    def generate(self, prompts, params):
        started = time.perf_counter()
        out = self.backend.generate(prompts, params)
        self.round_seconds.append(round(time.perf_counter() - started, 2))
        return out


def run(model, tokenizer, tasks, config, prefix_cache: bool):
    renderer = ChatRenderer(tokenizer)
    backend = HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id,
                        prefix_cache=prefix_cache)
    timed = TimedBackend(backend)
    envs = [make_env(task, max_steps=config.max_steps) for task in tasks]
    started = time.perf_counter()
    trajs = run_episodes(envs, timed, renderer, config, seed=0)
    seconds = time.perf_counter() - started
    tokens = sum(sum(t.action_mask) for t in trajs)
    stats = {"seconds": round(seconds, 2), "new_tokens": tokens,
             "tokens_per_s": round(tokens / seconds, 2), "episodes": len(trajs),
             "turns": sum(len(t.turn_spans) for t in trajs),
             "successes": sum(t.success for t in trajs),
             "prompt_tokens_prefilled": backend.prefilled_tokens,
             "prompt_tokens_reused": backend.reused_tokens,
             "round_seconds": timed.round_seconds}
    return stats, [t.input_ids for t in trajs]


def write_markdown(result: dict, command: str) -> None:
    rows, notes = "", ""
    for case in result["cases"]:
        on, off = case["prefix_cache_on"], case["prefix_cache_off"]
        for name, r in (("off", off), ("on", on)):
            rows += (f"| {case['policy']} | {name} | {r['episodes']} | {r['turns']} | "
                     f"{r['new_tokens']} | {r['prompt_tokens_prefilled']} | "
                     f"{r['prompt_tokens_reused']} | {r['seconds']} | {r['tokens_per_s']} | "
                     f"{' / '.join(str(s) for s in r['round_seconds'])} |\n")
        notes += (f"- {case['policy']}: speed-up **{case['speedup']:.2f}x** wall time; "
                  f"trajectories identical token for token: **{case['identical_trajectories']}**."
                  "\n")
    (RESULTS / "prefix_cache.md").write_text(
        "# Cross-turn prefix reuse in HFBackend\n\n"
        f"Command: `{command}`\n\n"
        f"{result['model']} (fp32), {result['tasks']} ToolWorld test tasks, greedy, up to "
        f"{result['max_steps']} turns of at most {result['max_new_tokens']} new tokens; the same "
        "episodes with `HFBackend(prefix_cache=False)` then `prefix_cache=True`. "
        f"Machine: {result['machine']}, torch {result['torch']} with {result['threads']} thread; "
        "other jobs may share the cores (1-minute load average "
        f"{result['load_average_start']} at start, {result['load_average_end']} at end; this "
        "benchmark adds 1), so absolute times are noisy; the two modes of a policy run back to "
        "back. Whole run "
        f"{result['total_seconds']} s.\n\n"
        "| policy | prefix cache | episodes | turns | new tokens | prompt tokens prefilled | "
        "prompt tokens reused | seconds | new tokens/s | seconds per round |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n" + rows + "\n" + notes +
        "\nThe vanilla model answers in prose at the first turn (no tool call), so its episodes "
        "end after one round and there is nothing to reuse: that row measures the overhead of "
        "storing the KV. The adapter (a cold-start SFT LoRA, merged; `runs/sft/adapter` is "
        "produced by `lopd sft` and not in git) calls tools, so its episodes run several "
        "rounds.\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--adapter", default="",
                        help="also run with this PEFT adapter merged (one that calls tools)")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()
    from lopd.policy import load_policy

    started = time.perf_counter()
    setup_runtime(threads=args.threads, seed=0)
    tasks = load_suite("toolworld-test", n=args.tasks)
    config = RolloutConfig(max_steps=args.max_steps, max_new_tokens=args.max_new_tokens,
                           temperature=0.0)
    load_start = round(os.getloadavg()[0], 2)
    cases = []
    for adapter in ["", args.adapter] if args.adapter else [""]:
        model, tokenizer = load_policy(args.model, adapter, "fp32")
        off, off_ids = run(model, tokenizer, tasks, config, prefix_cache=False)
        on, on_ids = run(model, tokenizer, tasks, config, prefix_cache=True)
        cases.append({"policy": f"{args.model} + {adapter}" if adapter else args.model,
                      "prefix_cache_off": off, "prefix_cache_on": on,
                      "speedup": round(off["seconds"] / on["seconds"], 2),
                      "identical_trajectories": on_ids == off_ids})
    result = {"model": args.model, "adapter": args.adapter, "dtype": "fp32",
              "threads": args.threads, "tasks": args.tasks, "max_steps": args.max_steps,
              "max_new_tokens": args.max_new_tokens, "temperature": 0.0, "cases": cases,
              "machine": f"{cpu_name()}, {os.cpu_count()} cores",
              "load_average_start": load_start, "load_average_end": round(os.getloadavg()[0], 2),
              "total_seconds": round(time.perf_counter() - started, 1),
              "torch": torch.__version__}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "prefix_cache.json").write_text(json.dumps(result, indent=2))
    command = (f".venv/bin/python benchmarks/bench_prefix_cache.py --model {args.model} "
               f"--tasks {args.tasks} --threads {args.threads} --max-steps {args.max_steps} "
               f"--max-new-tokens {args.max_new_tokens}"
               + (f" --adapter {args.adapter}" if args.adapter else ""))
    write_markdown(result, command)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
