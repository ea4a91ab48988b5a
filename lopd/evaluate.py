"""Evaluation: run a policy on task suites and report success, pass@1, BFCL per category and
behaviour statistics, as JSON and as a markdown table.

Evaluation decodes greedily (temperature 0) so numbers are reproducible; every method is
evaluated by this one function, with the same prompts and limits.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from lopd.rollout import RolloutConfig, run_episodes
from lopd.types import Task, Trajectory

BEHAVIOUR_KEYS = ("interaction_steps", "tool_calls_per_step", "first_response_tokens",
                  "reward_per_tool_call", "tool_errors", "truncated")


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize(trajectories: Sequence[Trajectory]) -> dict:
    """Success, mean reward, behaviour means, and per-category / per-tier success."""
    summary: dict = {
        "n": len(trajectories),
        "success": _mean([float(t.success) for t in trajectories]),
        "reward": _mean([t.reward for t in trajectories]),
        "behaviour": {k: _mean([t.stats.get(k, 0.0) for t in trajectories]) for k in BEHAVIOUR_KEYS},
    }
    for key in ("category", "tier", "domain"):
        buckets: dict[str, list[float]] = defaultdict(list)
        for traj in trajectories:
            label = traj.task.metadata.get(key, traj.task.domain if key == "domain" else None)
            if label is not None:
                buckets[str(label)].append(float(traj.success))
        if len(buckets) > 1 or key == "category" and buckets:
            summary[f"by_{key}"] = {k: _mean(v) for k, v in sorted(buckets.items())}
    return summary


def evaluate_tasks(
    backend, renderer, tasks: Sequence[Task], rollout: RolloutConfig, batch_size: int = 32,
    seed: int = 0, progress=None,
) -> list[Trajectory]:
    """Roll out every task once (greedy unless ``rollout.temperature > 0``), in batches."""
    from lopd.envs import make_env

    trajectories: list[Trajectory] = []
    for start in range(0, len(tasks), batch_size):
        chunk = tasks[start:start + batch_size]
        envs = [make_env(task, seed=seed, max_steps=rollout.max_steps) for task in chunk]
        trajectories += run_episodes(envs, backend, renderer, rollout, seed=seed)
        if progress is not None:
            progress(len(trajectories), len(tasks))
    return trajectories


def markdown_table(results: dict[str, dict]) -> str:
    """One row per suite: n, success (or pass@1), reward, behaviour; then BFCL categories."""
    head = "| suite | n | success / pass@1 | mean reward | steps | calls/step | first resp. tokens | reward/call |"
    lines = [head, "|" + "---|" * 8]
    for suite, s in results.items():
        b = s["behaviour"]
        lines.append(f"| {suite} | {s['n']} | {s['success']:.3f} | {s['reward']:.3f} | "
                     f"{b['interaction_steps']:.2f} | {b['tool_calls_per_step']:.2f} | "
                     f"{b['first_response_tokens']:.1f} | {b['reward_per_tool_call']:.3f} |")
    for suite, s in results.items():
        if "by_category" in s:
            cats = ", ".join(f"{k} {v:.3f}" for k, v in s["by_category"].items())
            lines.append(f"\n{suite} per category: {cats}")
    return "\n".join(lines) + "\n"


def _report(bar, job, suite: str, done: int, total: int) -> None:
    bar.update(job, completed=done)
    if not bar.console.is_terminal:
        bar.console.print(f"{suite}: {done}/{total} episodes")


def load_policy(model: str, adapter: str = "", dtype: str = "auto", device: str = "auto"):
    """(model, tokenizer) on ``device`` with an optional PEFT adapter merged in for fast
    generation."""
    from lopd.models import load_model

    base, tokenizer = load_model(model, dtype=dtype, device=device)
    if adapter:
        from peft import PeftModel

        base = PeftModel.from_pretrained(base, adapter).merge_and_unload()
        base.eval()
    return base, tokenizer


def run_eval(model: str, suites: list[str], limit: int = 0, out_dir: str = "runs/eval",
             adapter: str = "", threads: int = 2, dtype: str = "auto", device: str = "auto",
             max_new_tokens: int = 192,
             batch_size: int = 32, seed: int = 0, max_steps: int = 30) -> dict[str, dict]:
    """`lopd eval`: evaluate on each suite and write ``eval.json`` + ``eval.md`` to ``out_dir``."""
    from rich.progress import Progress

    from lopd.chat import ChatRenderer
    from lopd.envs import load_suite
    from lopd.generation import HFBackend
    from lopd.models import model_device, resolve_dtype, setup_runtime

    setup_runtime(threads=threads, seed=seed)
    policy, tokenizer = load_policy(model, adapter, dtype, device)
    renderer = ChatRenderer(tokenizer)
    backend = HFBackend(policy, renderer.stop_ids, tokenizer.pad_token_id,
                        autocast=resolve_dtype(dtype, model_device(policy)) == "bf16-autocast")
    context = int(getattr(policy.config, "max_position_embeddings", 8192) or 8192)
    results: dict[str, dict] = {}
    started = time.time()
    with Progress() as bar:
        for suite in suites:
            tasks = load_suite(suite, n=limit or None)
            # BFCL caps steps per user turn itself (20); the engine's cap covers whole episodes
            rollout = RolloutConfig(max_steps=400 if suite.startswith("bfcl") else max_steps,
                                    max_new_tokens=max_new_tokens, temperature=0.0,
                                    max_context_tokens=min(context, 8192))
            job = bar.add_task(suite, total=len(tasks))
            trajs = evaluate_tasks(backend, renderer, tasks, rollout, batch_size, seed,
                                   progress=lambda done, total, job=job, suite=suite: _report(
                                       bar, job, suite, done, total))
            results[suite] = summarize(trajs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"model": model, "adapter": adapter, "dtype": dtype, "limit": limit, "max_steps": max_steps,
            "max_new_tokens": max_new_tokens, "seconds": round(time.time() - started, 1)}
    (out / "eval.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    (out / "eval.md").write_text(f"# Evaluation of {model}{' + ' + adapter if adapter else ''}\n\n"
                                 + markdown_table(results))
    print(markdown_table(results))
    print(f"wrote {out / 'eval.json'} and {out / 'eval.md'}")
    return results
