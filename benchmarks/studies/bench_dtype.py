"""Training numerics on a CPU: fp32 against bf16 autocast for a trained LoRA student.

GRPO learned in fp32 and did not in bf16 autocast on the same tasks and the same CPU
(``benchmarks/results/learning.md``). This finds where the two ways of computing differ, on
the student's own greedy episodes of held-out ToolWorld tasks. For each trained adapter
(on the warm start) it measures:

- **the function**: every sampled token's log-probability under four ways of computing the
  same policy -- fp32 with the adapter unmerged (the reference), bf16 autocast unmerged (what
  training forwards compute), bf16 autocast over the merged weights ``W + s*B@A`` (what rollouts
  and evaluation decode with: ``rollout.merged_decoding``, ``lopd eval``), fp32 merged -- as
  its error against the reference next to the size of the adapter's own effect (the reference
  minus the warm start), and the share of greedy choices that change;
- **the gradient**: cosine and norm ratio of the LoRA gradient of the summed log-probability
  (a REINFORCE direction) in bf16 autocast against fp32, on the same rows;
- **the cost**: decoding the episodes in each (merged weights, as training does), and one
  forward + backward of a micro-batch, interleaved over ``--repeats`` rounds.

    .venv/bin/python -m benchmarks.studies.bench_dtype --adapters A[,B...] [--tasks 16] [--threads 1]

Writes ``benchmarks/results/studies/dtype.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from benchmarks.bench_throughput import cpu_line
from lopd.batch import collate, gather_token_logprobs
from lopd.chat import ChatRenderer
from lopd.envs import load_suite
from lopd.evaluate import evaluate_tasks
from lopd.generation import HFBackend
from lopd.merged import MergedStudent
from lopd.models import load_model, setup_runtime
from lopd.rollout import RolloutConfig
from lopd.teacher import student_logits

RESULTS = Path(__file__).parents[1] / "results" / "studies"
WARM = "benchmarks/results/learning/warm-start-adapter"
MODES = ("bf16 autocast, unmerged", "bf16 autocast, merged", "fp32, merged")


def load_student(adapter: str, warm: str):
    """(PEFT student with ``adapter`` trainable on the merged warm start, its merged view, tokenizer)."""
    from peft import PeftModel

    base, tokenizer = load_model("smollm2-135m", "fp32", "cpu", init_adapter=warm)
    student = PeftModel.from_pretrained(base, adapter, is_trainable=True)
    return student, MergedStudent(student, "default").model, tokenizer


def sampled_logits(model, trajs, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits at the sampled tokens' positions ``(N, V)``, those tokens ``(N,)``), as the
    training forward computes them."""
    batch = collate(trajs, pad_id, through_last_action=True)
    logits = student_logits(model, batch, positions="supervised", share_prefix=False)
    return logits, batch.targets[batch.target_mask]


def token_logprobs(model, trajs, pad_id: int, autocast: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probabilities of the sampled tokens, whether each is the argmax), one row at a time."""
    logps, greedy = [], []
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        for traj in trajs:
            logits, targets = sampled_logits(model, [traj], pad_id)
            logps.append(gather_token_logprobs(logits, targets))
            greedy.append(logits.float().argmax(-1) == targets)
    return torch.cat(logps), torch.cat(greedy)


def function_errors(student, merged, trajs, pad_id: int) -> dict:
    """Each way's log-prob error against fp32 unmerged, beside the adapter's own effect."""
    reference, ref_greedy = token_logprobs(student, trajs, pad_id, autocast=False)
    with student.disable_adapter():
        warm, _ = token_logprobs(student, trajs, pad_id, autocast=False)
    effect = (reference - warm).pow(2).mean().sqrt().item()
    ways = {MODES[0]: (student, True), MODES[1]: (merged, True), MODES[2]: (merged, False)}
    rows = {}
    for name, (model, autocast) in ways.items():
        logp, greedy = token_logprobs(model, trajs, pad_id, autocast)
        error = (logp - reference).pow(2).mean().sqrt().item()
        rows[name] = {"rms_error": round(error, 4), "error_over_effect": round(error / effect, 3),
                      "effect_corr": round(torch.corrcoef(torch.stack(
                          [logp - warm, reference - warm]))[0, 1].item(), 3),
                      "greedy_flips": round((greedy != ref_greedy).float().mean().item(), 4)}
    return {"tokens": int(reference.numel()), "adapter_effect_rms": round(effect, 4), "ways": rows}


def lora_gradient(student, trajs, pad_id: int, autocast: bool) -> torch.Tensor:
    """The flattened LoRA gradient of the summed sampled-token log-probability of ``trajs``."""
    params = [p for n, p in student.named_parameters() if "lora_" in n]
    student.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits, targets = sampled_logits(student, trajs, pad_id)
    gather_token_logprobs(logits, targets).sum().backward()
    return torch.cat([p.grad.flatten() for p in params])


def gradient_and_update_time(student, trajs, pad_id: int, repeats: int) -> dict:
    """bf16-autocast LoRA gradient against fp32 (cosine, norm ratio) and each one's time."""
    times: dict[str, list[float]] = {"fp32": [], "bf16 autocast": []}
    grads = {}
    for _ in range(repeats):
        for name, autocast in (("fp32", False), ("bf16 autocast", True)):
            started = time.perf_counter()
            grads[name] = lora_gradient(student, trajs, pad_id, autocast)
            times[name].append(time.perf_counter() - started)
    fp32, bf16 = grads["fp32"], grads["bf16 autocast"]
    return {"cosine": round(torch.nn.functional.cosine_similarity(fp32, bf16, dim=0).item(), 4),
            "norm_ratio": round((bf16.norm() / fp32.norm()).item(), 4),
            "seconds": {k: round(statistics.median(v), 2) for k, v in times.items()}}


def decode(merged, renderer, tokenizer, tasks, args, autocast: bool) -> tuple[list, float]:
    """Greedy episodes of ``tasks`` decoded with the merged weights; (trajectories, seconds)."""
    backend = HFBackend(merged, renderer.stop_ids, tokenizer.pad_token_id, autocast=autocast)
    rollout = RolloutConfig(max_steps=args.turns, max_new_tokens=args.max_new_tokens,
                            temperature=0.0, max_context_tokens=8192)
    started = time.perf_counter()
    trajs = evaluate_tasks(backend, renderer, tasks, rollout, batch_size=len(tasks))
    return trajs, time.perf_counter() - started


def linear_call_times(rows: int = 8, calls: int = 300) -> dict:
    """Microseconds per call of one SmolLM2 MLP projection (576 -> 1536, frozen, ``rows`` rows
    of one token: a decode step) in fp32, under bf16 autocast, and with bf16 weights: what
    autocast's per-call cast of a frozen fp32 weight costs."""
    linear = torch.nn.Linear(576, 1536, bias=False).requires_grad_(False)
    bf16 = torch.nn.Linear(576, 1536, bias=False).to(torch.bfloat16).requires_grad_(False)
    x = torch.randn(rows, 1, 576)

    def autocast_call():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            linear(x)

    calls_of = {"fp32": lambda: linear(x), "bf16 autocast": autocast_call,
                "bf16 weights": lambda: bf16(x.bfloat16())}
    times: dict[str, list[float]] = {name: [] for name in calls_of}
    with torch.no_grad():
        for _ in range(3):  # interleaved rounds
            for name, call in calls_of.items():
                call()
                started = time.perf_counter()
                for _ in range(calls):
                    call()
                times[name].append((time.perf_counter() - started) / calls * 1e6)
    return {name: round(statistics.median(v)) for name, v in times.items()}


def measure(adapter: str, args) -> dict:
    student, merged, tokenizer = load_student(adapter, args.warm)
    renderer = ChatRenderer(tokenizer)
    tasks = load_suite("toolworld-test", n=args.tasks)
    decode_s: dict[str, list[float]] = {"fp32": [], "bf16 autocast": []}
    episodes = {}
    for _ in range(args.repeats):
        for name, autocast in (("fp32", False), ("bf16 autocast", True)):
            episodes[name], seconds = decode(merged, renderer, tokenizer, tasks, args, autocast)
            decode_s[name].append(seconds)
    reference, pad = episodes["fp32"], tokenizer.pad_token_id
    return {"adapter": adapter, "function": function_errors(student, merged, reference, pad),
            "gradient": gradient_and_update_time(student, reference[:args.micro_batch], pad,
                                                 args.repeats),
            "decode_seconds": {k: round(statistics.median(v), 1) for k, v in decode_s.items()},
            "greedy_successes": {k: sum(t.success for t in v) for k, v in episodes.items()},
            "identical_episodes": sum(a.input_ids == b.input_ids for a, b in
                                      zip(reference, episodes["bf16 autocast"]))}


def report(result: dict) -> str:
    args = result["args"]
    lines = ["# Training numerics: fp32 against bf16 autocast (LoRA student, CPU)", "",
             f"`{result['command']}`", "", (f"CPU: {result['cpu']}; load average "
             f"{result['load'][0]} at start, {result['load'][1]} at end."), "",
             (f"Per adapter: greedy episodes of the first {args['tasks']} held-out ToolWorld tasks "
              f"({args['turns']} turns of {args['max_new_tokens']} tokens) decoded from the "
              "merged weights in fp32; their sampled tokens re-scored each way. *error* = RMS "
              "log-prob difference from fp32 unmerged; *effect* = RMS of (fp32 unmerged - warm "
              "start), what training changed; *corr* = correlation of each way's change from "
              "the warm start with the reference's; *flips* = share of tokens whose argmax "
              "changes."), "",
             "| adapter | way | error | error / effect | corr | flips |", "|---|---|---|---|---|---|"]
    for run in result["runs"]:
        name, f = _run_name(run["adapter"]), run["function"]
        for way, row in f["ways"].items():
            lines.append(f"| {name} ({f['tokens']} tokens, effect {f['adapter_effect_rms']}) | "
                         f"{way} | {row['rms_error']} | {row['error_over_effect']} | "
                         f"{row['effect_corr']} | {row['greedy_flips']} |")
    lines += ["", ("| adapter | gradient cosine (bf16 vs fp32) | norm ratio | fwd+bwd fp32 s | "
              "fwd+bwd bf16 s | decode fp32 s | decode bf16 s | greedy successes fp32 / bf16 | "
              "identical episodes |"), "|---|---|---|---|---|---|---|---|---|"]
    for run in result["runs"]:
        g, d, s = run["gradient"], run["decode_seconds"], run["greedy_successes"]
        lines.append(f"| {_run_name(run['adapter'])} | {g['cosine']} | {g['norm_ratio']} | "
                     f"{g['seconds']['fp32']} | {g['seconds']['bf16 autocast']} | {d['fp32']} | "
                     f"{d['bf16 autocast']} | {s['fp32']} / {s['bf16 autocast']} | "
                     f"{run['identical_episodes']} of {args['tasks']} |")
    linear = result["linear_call_us"]
    lines += ["", "One frozen 576 -> 1536 linear, 8 rows of one token (a decode step's MLP "
              "projection), microseconds a call: " + ", ".join(f"{k} {v}" for k, v in linear.items())
              + ". Autocast casts the frozen fp32 weight to bf16 at every call."]
    return "\n".join(lines) + "\n"


def _run_name(adapter: str) -> str:
    """``RUN/step-N`` for an adapter inside a run's checkpoints, else the path."""
    parts = Path(adapter).parts
    return f"{parts[-4]}/{parts[-2]}" if len(parts) >= 4 and parts[-3] == "checkpoints" else adapter


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--adapters", required=True, help="comma-separated trained LoRA adapter dirs")
    p.add_argument("--warm", default=WARM, help="the warm start they were trained on")
    p.add_argument("--tasks", type=int, default=16)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--name", default="dtype")
    args = p.parse_args(argv)
    setup_runtime(threads=args.threads, seed=0)
    load = os.getloadavg()[0]
    linear = linear_call_times()
    runs = [measure(adapter, args) for adapter in args.adapters.split(",")]
    result = {"linear_call_us": linear, "args": vars(args), "cpu": cpu_line(), "load": [round(load, 2), round(os.getloadavg()[0], 2)],
              "command": "python -m benchmarks.studies.bench_dtype " + " ".join(
                  f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
              "runs": runs}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / f"{args.name}.md").write_text(report(result))
    print(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
