"""Rollout throughput: lopd's batched engine vs a one-environment-at-a-time `generate()` loop.

Both run the same ToolWorld tasks with the same model, dtype, thread count, sampling settings
and turn budget; the baseline plays each episode alone, calling `model.generate()` once per
turn (what a straightforward agent loop does). Reported: new (sampled) tokens per second.

    .venv/bin/python benchmarks/bench_rollout.py [--tasks 16] [--model smollm2-135m] [--adapter DIR]

Writes benchmarks/results/rollout.{json,md} (rollout_adapter.* with --adapter).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from lopd.chat import ChatRenderer
from lopd.envs import load_suite, make_env
from lopd.generation import HFBackend
from lopd.models import setup_runtime
from lopd.policy import load_policy
from lopd.rollout import RolloutConfig, run_episodes

RESULTS = Path(__file__).parent / "results"


class GenerateBackend:
    """One prompt at a time through transformers' `generate()` (the baseline)."""

    def __init__(self, model, stop_ids, pad_id):
        self.model, self.stop_ids, self.pad_id = model, sorted(stop_ids), pad_id

    @torch.no_grad()
    def generate(self, prompts, params):
        outputs = []
        for prompt in prompts:
            ids = torch.tensor([prompt])
            out = self.model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=params.max_new_tokens,
                do_sample=params.temperature > 0, temperature=params.temperature or None,
                top_p=params.top_p, top_k=0, eos_token_id=self.stop_ids,
                pad_token_id=self.pad_id)
            outputs.append(out[0, len(prompt):].tolist())
        return outputs


def run(backend, tasks, renderer, config, one_at_a_time: bool):
    started = time.perf_counter()
    trajs = []
    if one_at_a_time:
        for task in tasks:
            trajs += run_episodes([make_env(task, max_steps=config.max_steps)], backend, renderer,
                                  config, seed=0)
    else:
        envs = [make_env(task, max_steps=config.max_steps) for task in tasks]
        trajs = run_episodes(envs, backend, renderer, config, seed=0)
    seconds = time.perf_counter() - started
    tokens = sum(sum(t.action_mask) for t in trajs)
    return {"seconds": round(seconds, 2), "new_tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 1), "episodes": len(trajs),
            "turns": sum(len(t.turn_spans) for t in trajs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--adapter", default="", help="PEFT adapter (merged), e.g. runs/sft/adapter")
    args = parser.parse_args()
    setup_runtime(threads=args.threads, seed=0)
    model, tokenizer = load_policy(args.model, args.adapter, args.dtype)
    renderer = ChatRenderer(tokenizer)
    tasks = load_suite("toolworld-test", n=args.tasks)
    config = RolloutConfig(max_steps=3, max_new_tokens=args.max_new_tokens, temperature=1.0,
                           max_context_tokens=4096)
    engine = run(HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id), tasks, renderer,
                 config, one_at_a_time=False)
    baseline = run(GenerateBackend(model, renderer.stop_ids, tokenizer.pad_token_id), tasks,
                   renderer, config, one_at_a_time=True)
    speedup = engine["tokens_per_s"] / baseline["tokens_per_s"]
    result = {"model": args.model, "adapter": args.adapter, "dtype": args.dtype, "threads": args.threads,
              "tasks": args.tasks, "max_new_tokens": args.max_new_tokens, "max_steps": 3,
              "temperature": 1.0, "engine": engine, "generate_loop": baseline,
              "speedup": round(speedup, 2), "torch": torch.__version__}
    RESULTS.mkdir(parents=True, exist_ok=True)
    command = (f".venv/bin/python benchmarks/bench_rollout.py --model {args.model} --tasks "
               f"{args.tasks} --threads {args.threads} --dtype {args.dtype} --max-new-tokens "
               f"{args.max_new_tokens}" + (f" --adapter {args.adapter}" if args.adapter else ""))
    name = "rollout_adapter" if args.adapter else "rollout"
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2))
    (RESULTS / f"{name}.md").write_text(
        "# Rollout throughput\n\n"
        f"`{command}` ({args.threads} CPU threads, {args.dtype}, ToolWorld test tasks, "
        "up to 3 turns, sampling at temperature 1).\n\n"
        "| loop | episodes | turns | new tokens | seconds | new tokens/s |\n|---|---|---|---|---|---|\n"
        f"| lopd engine (batched) | {engine['episodes']} | {engine['turns']} | {engine['new_tokens']} | "
        f"{engine['seconds']} | {engine['tokens_per_s']} |\n"
        f"| one env at a time, `generate()` | {baseline['episodes']} | {baseline['turns']} | "
        f"{baseline['new_tokens']} | {baseline['seconds']} | {baseline['tokens_per_s']} |\n\n"
        f"Speed-up: **{speedup:.2f}x** new tokens/s.\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
