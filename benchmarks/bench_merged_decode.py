"""Decoding with the LoRA student merged (``lopd.merged.MergedStudent``) against the PEFT model.

Both play the same ToolWorld episodes with the same weights: the warm start merged into the
base and a student LoRA adapter on top (a trained one with ``--student``, else one with small
random B so that the adapter changes the function). Settings alternate A B B A ... in one
process, so their ratio holds on a noisy machine. Reported per setting: seconds, sampled
tokens, new tokens/s, and whether the greedy episodes are token for token the same.

    .venv/bin/python -m benchmarks.bench_merged_decode [--tasks 32] [--rounds 2] [--temperature 0]

Writes benchmarks/results/merged_decode.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from lopd.chat import ChatRenderer
from lopd.envs import make_env, task_pool
from lopd.generation import HFBackend
from lopd.merged import MergedStudent
from lopd.models import add_adapter, load_model, setup_runtime
from lopd.rollout import RolloutConfig, run_episodes

RESULTS = Path(__file__).parent / "results"
WARM = "benchmarks/results/learning/warm-start-adapter"  # run from the repository root
STUDENT = "default"


def student_model(args):
    model, tokenizer = load_model("smollm2-135m", "fp32", "cpu", init_adapter=args.init_adapter)
    peft = add_adapter(model, STUDENT)
    if args.student:
        from peft.utils import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(peft, load_file(str(Path(args.student) / "adapter_model.safetensors")),
                                  adapter_name=STUDENT)
    else:
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, parameter in peft.named_parameters():
                if "lora_B" in name:
                    parameter.copy_(torch.randn(parameter.shape, generator=generator) * 1e-3)
    peft.eval()
    return peft, tokenizer


def play(model, tokenizer, renderer, tasks, config):
    backend = HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id)
    envs = [make_env(task, max_steps=config.max_steps) for task in tasks]
    started = time.perf_counter()
    trajs = run_episodes(envs, backend, renderer, config, seed=0)
    seconds = time.perf_counter() - started
    tokens = sum(sum(t.action_mask) for t in trajs)
    return seconds, tokens, [t.input_ids for t in trajs], sum(t.success for t in trajs)


def main() -> None:
    from benchmarks.bench_throughput import cpu_line

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="A B B A rounds")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--init-adapter", default=str(WARM))
    parser.add_argument("--student", default="", help="a trained student adapter directory")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    setup_runtime(threads=args.threads, seed=0)
    peft, tokenizer = student_model(args)
    renderer = ChatRenderer(tokenizer)
    merged = MergedStudent(peft, STUDENT)
    models = {"peft": peft, "merged": merged.sync()}
    tasks = task_pool("toolworld-test", args.tasks)
    config = RolloutConfig(max_steps=args.max_steps, max_new_tokens=args.max_new_tokens,
                           temperature=args.temperature)
    runs: dict[str, list] = {"peft": [], "merged": []}
    order = [name for r in range(args.rounds) for name in (("peft", "merged") if r % 2 == 0 else ("merged", "peft"))]
    for name in order:
        with torch.no_grad():
            runs[name].append(play(models[name], tokenizer, renderer, tasks, config))
        seconds, tokens, _, solved = runs[name][-1]
        print(f"{name}: {seconds:.1f} s, {tokens} tokens, {tokens / seconds:.1f} tok/s, solved {solved}")
    same = all(a[2] == b[2] for a, b in zip(runs["peft"], runs["merged"]))
    rows = {name: {"seconds": [round(r[0], 1) for r in rs], "tokens": [r[1] for r in rs],
                   "solved": [r[3] for r in rs],
                   "tokens_per_s": round(sum(r[1] for r in rs) / sum(r[0] for r in rs), 1)}
            for name, rs in runs.items()}
    ratio = rows["merged"]["tokens_per_s"] / rows["peft"]["tokens_per_s"]
    command = ("python -m benchmarks.bench_merged_decode " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v not in ("", None)))
    result = {"command": command, "cpu": cpu_line(), "tasks": args.tasks, "temperature": args.temperature,
              "max_steps": args.max_steps, "max_new_tokens": args.max_new_tokens,
              "student": args.student or "random B (std 1e-3)", "runs": rows,
              "same_tokens": same, "speedup": round(ratio, 2), "torch": torch.__version__}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "merged_decode.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# Decoding with the LoRA student merged", "", f"`{command}`", "", f"CPU: {result['cpu']}", "",
             (f"{args.tasks} ToolWorld test tasks, up to {args.max_steps} turns of "
              f"{args.max_new_tokens} tokens, temperature {args.temperature:g}; student: "
              f"{result['student']}; settings alternated A B B A in one process."), "",
             "| decoding with | runs (s) | sampled tokens | new tokens/s | solved |", "|---|---|---|---|---|"]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['seconds']} | {row['tokens']} | {row['tokens_per_s']} | {row['solved']} |")
    lines += ["", (f"Merged / PEFT new tokens per second: **{ratio:.2f}x**; same tokens in every "
                   f"episode: {same}.")]
    (RESULTS / "merged_decode.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
