"""Rollout phase only: the HF loop against the vLLM engine, interleaved in one process.

The same student (SmolLM2 with the committed warm start merged), the same ToolWorld episodes
(``--tasks`` training tasks x ``--group`` rollouts, the preset's turn limits and temperature),
sampled in rounds A B B A ... by ``HFBackend`` (bf16 autocast where the CPU has native bf16, as
``model.dtype=auto`` does) and by ``VLLMBackend`` (bf16, prefix caching); then a greedy held-out
evaluation of ``--eval-tasks`` tasks with each. Reports new tokens per second and episodes per
hour per backend and their ratio. Interleaving makes the ratio fair on a shared machine; the
absolute rates are not. The full trainer's rollouts per hour need ``bench_throughput.py`` with
``--also "vllm=rollout.backend=vllm"``.

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.bench_vllm_rollout --tasks 4 --group 4 \
        --rounds 4 --eval-tasks 8
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).parent / "results"


def run(backend, renderer, tasks, group: int, rollout, seed: int, greedy: bool = False) -> dict:
    from lopd.envs import make_env
    from lopd.rollout import make_group_envs, run_episodes

    if greedy:
        envs, groups = [make_env(t, seed=0, max_steps=rollout.max_steps) for t in tasks], None
    else:
        envs, groups = make_group_envs(tasks, group, make_env, rollout.max_steps, seed=seed)
    started = time.perf_counter()
    trajs = run_episodes(envs, backend, renderer, rollout, seed=seed, groups=groups)
    seconds = time.perf_counter() - started
    tokens = sum(sum(t.action_mask) for t in trajs)
    return {"episodes": len(trajs), "tokens": tokens, "seconds": seconds,
            "success": sum(t.success for t in trajs) / len(trajs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4,
                        help="rounds; each samples the episodes once per backend (A B, B A, ...)")
    parser.add_argument("--eval-tasks", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--name", default="vllm_rollout")
    args = parser.parse_args()

    from benchmarks.bench_throughput import cpu_line
    from lopd.chat import ChatRenderer
    from lopd.config import load_config
    from lopd.demo import WARM_START
    from lopd.envs import task_pool
    from lopd.generation import HFBackend
    from lopd.models import load_model, resolve_dtype, resolve_model_dir, setup_runtime
    from lopd.rollout import RolloutConfig
    from lopd.vllm_backend import VLLMBackend

    setup_runtime(threads=args.threads, seed=0)
    preset = load_config("configs/toolworld-smollm2.yaml").rollout
    model, tokenizer = load_model("smollm2-135m", dtype="fp32", device="cpu",
                                  init_adapter=str(WARM_START))
    model.eval()
    renderer = ChatRenderer(tokenizer)
    autocast = resolve_dtype("auto", torch.device("cpu")) == "bf16-autocast"
    backends = {"hf": HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id,
                                autocast=autocast)}
    started = time.perf_counter()
    backends["vllm"] = VLLMBackend(str(resolve_model_dir("smollm2-135m")), renderer.stop_ids,
                                   max_model_len=2048, kv_cache_gb=1.5)
    backends["vllm"].sync(model)
    engine_seconds = time.perf_counter() - started
    train = RolloutConfig(max_steps=preset.max_steps, max_new_tokens=preset.max_new_tokens,
                          temperature=preset.temperature)
    held_out = RolloutConfig(max_steps=preset.max_steps, max_new_tokens=preset.max_new_tokens,
                             temperature=0.0)
    tasks = task_pool("toolworld-train", args.tasks, 1)
    eval_tasks = task_pool("toolworld-test", args.eval_tasks, 0)
    rows: dict[str, list[dict]] = {"hf": [], "vllm": []}
    for index in range(args.rounds):
        order = ["hf", "vllm"] if index % 2 == 0 else ["vllm", "hf"]
        for name in order:
            rows[name].append(run(backends[name], renderer, tasks, args.group, train, seed=index))
            print(name, rows[name][-1], flush=True)
    evals = {}
    for name in ("hf", "vllm"):
        evals[name] = run(backends[name], renderer, eval_tasks, 1, held_out, seed=0, greedy=True)
        print(name, "eval", evals[name], flush=True)
    report = {"cpu": cpu_line(), "args": vars(args), "engine_build_seconds": engine_seconds,
              "rollouts": rows, "eval": evals}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(report, indent=2))
    print(summary(report))


def summary(report: dict) -> str:
    """Per backend: new tokens/s and episodes/h of the rollouts, held-out episodes/h."""
    lines = ["| backend | rollout tokens/s | rollouts/h (generation only) | held-out episodes/h |",
             "|---|---|---|---|"]
    rates = {}
    for name, rows in report["rollouts"].items():
        seconds = sum(r["seconds"] for r in rows)
        tokens = sum(r["tokens"] for r in rows) / seconds
        episodes = 3600 * sum(r["episodes"] for r in rows) / seconds
        held = 3600 * report["eval"][name]["episodes"] / report["eval"][name]["seconds"]
        rates[name] = (tokens, episodes, held)
        lines.append(f"| {name} | {tokens:.1f} | {episodes:.0f} | {held:.0f} |")
    ratio = [v / h for v, h in zip(rates["vllm"], rates["hf"])]
    lines.append(f"| vllm / hf | {ratio[0]:.2f}x | {ratio[1]:.2f}x | {ratio[2]:.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
