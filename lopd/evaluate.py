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
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lopd.rollout import RolloutConfig, run_episodes
from lopd.types import Task, Trajectory

BEHAVIOUR_KEYS = ("interaction_steps", "tool_calls_per_step", "first_response_tokens",
                  "reward_per_tool_call", "tool_errors", "truncated")


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize(trajectories: Sequence[Trajectory]) -> dict:
    """Success (with its standard error), mean reward, behaviour means, per-category / per-tier
    success, and each task's success (``per_task``: id -> success, averaged over a task's
    episodes; for paired comparisons of two runs on the same tasks)."""
    successes = [float(t.success) for t in trajectories]
    summary: dict = {
        "n": len(trajectories),
        "success": _mean(successes),
        "success_se": standard_error(successes),
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
    per_task: dict[str, list[float]] = defaultdict(list)
    for traj in trajectories:
        per_task[traj.task.id].append(float(traj.success))
    summary["per_task"] = {k: _mean(v) for k, v in per_task.items()}
    return summary


def paired_gain(after: dict[str, float], before: dict[str, float]) -> tuple[float, float, int]:
    """Mean and standard error of per-task success differences (``per_task`` dicts) on the
    tasks both ran, and their number."""
    diffs = [after[t] - before[t] for t in sorted(set(after) & set(before))]
    return (sum(diffs) / len(diffs) if diffs else 0.0), standard_error(diffs), len(diffs)


def standard_error(values: Sequence[float]) -> float:
    """Standard error of the mean (sample std / sqrt(n)); 0 for fewer than two values."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = _mean(values)
    return (sum((v - mean) ** 2 for v in values) / (n - 1) / n) ** 0.5


def evaluate_tasks(
    backend, renderer, tasks: Sequence[Task], rollout: RolloutConfig, batch_size: int = 32,
    seed: int = 0, progress=None,
) -> list[Trajectory]:
    """Roll out every task once (greedy unless ``rollout.temperature > 0``), in batches."""
    from lopd.envs import make_env

    trajectories: list[Trajectory] = []
    for start in range(0, len(tasks), batch_size):
        chunk = tasks[start:start + batch_size]
        envs = [make_env(task, seed=seed, max_steps=rollout.max_steps,
                         max_calls=rollout.max_calls_per_turn) for task in chunk]
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
        if "pass_at_k" in s:
            lines.append(f"\n{suite}: {s['samples']} sampled episodes per task, mean success "
                         f"{s['success']:.3f}, pass@{s['samples']} {s['pass_at_k']:.3f}")
    for suite, s in results.items():
        if "by_category" in s:
            cats = ", ".join(f"{k} {v:.3f}" for k, v in s["by_category"].items())
            lines.append(f"\n{suite} per category: {cats}")
    return "\n".join(lines) + "\n"


def _report(bar, job, suite: str, done: int, total: int) -> None:
    bar.update(job, completed=done)
    if not bar.console.is_terminal:
        bar.console.print(f"{suite}: {done}/{total} episodes")


@dataclass
class EvalSpec:
    """What ``lopd eval`` runs: which policy, which suites, how episodes are decoded.

    The policy is ``model`` + ``init_adapter`` (merged first) + ``adapter``; or, with ``run``,
    that run's newest student (warm start included); or, with ``run`` and ``latent_memory``, the
    run's frozen initial policy acting with latents composed from the run's bank and composer
    (``lopd.latent_memory``). ``samples`` > 1 plays each task that many times with
    ``temperature`` / ``top_p`` / ``top_k`` and reports the mean and pass@k beside it; the
    default is one greedy episode per task.
    """

    model: str = "smollm2-135m"
    suites: list[str] = field(default_factory=lambda: ["toolworld-test"])
    limit: int = 0
    out_dir: str = "runs/eval"
    adapter: str = ""
    init_adapter: str = ""
    run: str = ""
    latent_memory: bool = False
    threads: int = 2
    dtype: str = "auto"
    device: str = "auto"
    max_new_tokens: int = 192
    max_steps: int = 30
    batch_size: int = 32
    seed: int = 0
    samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    backend: str = "auto"  # rollout.backend: auto | hf | vllm (lopd.vllm_backend)

    def describe(self) -> str:
        if self.run:
            return f"run {self.run}" + (" (teacher + latent memory)" if self.latent_memory else "")
        parts = [self.model] + [a for a in (self.init_adapter, self.adapter) if a]
        return " + ".join(parts)


def pass_at_k(trajectories: Sequence[Trajectory]) -> float:
    """Share of tasks with at least one successful episode among their samples."""
    solved: dict[str, bool] = {}
    for traj in trajectories:
        solved[traj.task.id] = solved.get(traj.task.id, False) or traj.success
    return _mean([float(v) for v in solved.values()])


def _policy_backend(spec: EvalSpec):
    """(backend, renderer, context length) for the spec's policy."""
    from lopd.chat import ChatRenderer
    from lopd.generation import HFBackend
    from lopd.models import model_device, resolve_dtype
    from lopd.policy import load_policy, load_run_policy
    from lopd.vllm_backend import VLLMBackend, engine_dtype, resolve_backend

    if spec.run and spec.latent_memory:
        from lopd.latent_memory import build_run_runtime

        rt = build_run_runtime(spec.run, spec.threads, "" if spec.device == "auto" else spec.device)
        return None, rt
    if spec.run:
        policy, tokenizer = load_run_policy(spec.run, spec.dtype, spec.device)
    else:
        policy, tokenizer = load_policy(spec.model, spec.adapter, spec.dtype, spec.device,
                                        init_adapter=spec.init_adapter)
    renderer = ChatRenderer(tokenizer)
    dtype = resolve_dtype(spec.dtype, model_device(policy))
    context = int(getattr(policy.config, "max_position_embeddings", 8192) or 8192)
    if resolve_backend(spec.backend) == "vllm":
        backend = VLLMBackend(policy.name_or_path, renderer.stop_ids, engine_dtype(dtype),
                              spec.seed, max_model_len=min(context, 8192))
        backend.sync(policy)  # the merged policy's weights (warm start and adapter included)
        return (backend, renderer, context), None
    backend = HFBackend(policy, renderer.stop_ids, tokenizer.pad_token_id,
                        autocast=dtype == "bf16-autocast")
    return (backend, renderer, context), None


def run_eval(spec: EvalSpec) -> dict[str, dict]:
    """`lopd eval`: evaluate on each suite and write ``eval.json`` + ``eval.md`` to ``out_dir``."""
    from rich.progress import Progress

    from lopd.envs import load_suite
    from lopd.models import setup_runtime

    setup_runtime(threads=spec.threads, seed=spec.seed)
    built, rt = _policy_backend(spec)
    results: dict[str, dict] = {}
    started = time.time()
    with Progress() as bar:
        for suite in spec.suites:
            tasks = load_suite(suite, n=spec.limit or None)
            # BFCL caps steps per user turn itself (20); the engine's cap covers whole episodes
            steps = 400 if suite.startswith("bfcl") else spec.max_steps
            if rt is not None:
                from lopd.latent_memory import latent_memory_backend

                backend, renderer, context = latent_memory_backend(rt, tasks, steps), \
                    rt.renderer, 8192
            else:
                backend, renderer, context = built
            rollout = RolloutConfig(max_steps=steps, max_new_tokens=spec.max_new_tokens,
                                    temperature=spec.temperature, top_p=spec.top_p,
                                    top_k=spec.top_k, max_context_tokens=min(context, 8192))
            played = [t for t in tasks for _ in range(max(spec.samples, 1))]
            job = bar.add_task(suite, total=len(played))
            trajs = evaluate_tasks(backend, renderer, played, rollout, spec.batch_size, spec.seed,
                                   progress=lambda done, total, job=job, suite=suite: _report(
                                       bar, job, suite, done, total))
            results[suite] = summarize(trajs)
            if spec.samples > 1:
                results[suite].update(samples=spec.samples, pass_at_k=pass_at_k(trajs))
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = {**asdict(spec), "seconds": round(time.time() - started, 1)}
    (out / "eval.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    (out / "eval.md").write_text(f"# Evaluation of {spec.describe()}\n\n" + markdown_table(results))
    print(markdown_table(results))
    print(f"wrote {out / 'eval.json'} and {out / 'eval.md'}")
    return results


def evaluate_runtime(rt) -> dict:
    """A training run's held-out evaluation: its current student, greedy, on ``rt.eval_tasks``
    with the run's turn and token budgets (``rollout.eval_max_new_tokens``); the summary of
    ``summarize``."""
    cfg = rt.config
    backend = rt.backend()
    rollout = RolloutConfig(max_steps=cfg.rollout.max_steps,
                            max_new_tokens=cfg.rollout.eval_tokens,
                            max_context_tokens=cfg.rollout.max_context_tokens, temperature=0.0)
    trajs = evaluate_tasks(backend, rt.renderer, rt.eval_tasks, rollout,
                           batch_size=cfg.data.eval_batch, seed=cfg.run.seed)
    return summarize(trajs)
