"""`lopd sft`: a short supervised warm start on reference trajectories of the training split.

SmolLM2-135M-Instruct rarely emits a well-formed tool call zero-shot, so (DESIGN.md §4) the
starting point of every method at this scale is a LoRA adapter fitted for a few dozen steps on
reference trajectories (NLL of the assistant tokens only). The paper starts from instruct models
that already call tools; this warm start plays that role. Every comparison calls the result
"vanilla" and says so. Output: a PEFT adapter directory (``OUT/adapter``) that
``model.init_adapter`` and ``lopd eval --adapter`` accept, plus ``OUT/sft.json``.

Speed: by default each step's batch comes from one domain (a random one per step). Rows of a
domain start with the same system prompt (tool descriptions, ~340 of ~600 tokens), which then
runs once per batch with its KV shared (``lopd.prefix``, exact gradients) on CPUs.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import torch


def shared_prefix_lens(trajs) -> list[int]:
    """Per row, the token prefix it shares with the other rows of its domain in the batch (the
    domain's system prompt), capped by its own prompt; a row alone in its domain keeps its
    prompt length."""
    lengths = []
    for traj in trajs:
        ids = traj.input_ids[: traj.prompt_len]
        shared = len(ids)
        for other in trajs:
            if other is not traj and other.task.domain == traj.task.domain:
                same = next((i for i, (a, b) in enumerate(zip(ids, other.input_ids)) if a != b),
                            min(len(ids), len(other.input_ids)))
                shared = min(shared, same)
        lengths.append(max(shared, 1))
    return lengths


def sft_loss(model, trajs, pad_id: int, share_prefix: bool = True) -> torch.Tensor:
    """Mean over trajectories of the per-trajectory mean NLL of action tokens. With
    ``share_prefix`` rows of one domain run their common system prompt once."""
    from lopd.batch import collate, gather_token_logprobs
    from lopd.models import model_device
    from lopd.teacher import student_logits

    batch = collate(trajs, pad_id)
    if share_prefix:  # the split point only: no context is inserted in a student forward
        batch.prompt_lens = torch.tensor(shared_prefix_lens(trajs), dtype=torch.long)
    batch = batch.to(model_device(model))
    logits = student_logits(model, batch, positions="supervised", share_prefix=share_prefix)
    targets = batch.targets[batch.target_mask]
    rows = batch.target_mask.nonzero()[:, 0]
    nll = -gather_token_logprobs(logits, targets)  # (N,)
    per_row = torch.zeros(len(trajs), device=nll.device).index_add(0, rows, nll) / torch.bincount(rows, minlength=len(trajs)).clamp(min=1)
    return per_row.mean()


def run_sft(model: str = "smollm2-135m", suite: str = "toolworld-train", out_dir: str = "runs/sft",
            steps: int = 60, threads: int = 2, batch_size: int = 4, lr: float = 5e-4,
            lora_r: int = 16, n_tasks: int = 400, seed: int = 0, dtype: str = "auto",
            device: str = "auto", mixed_batches: bool = False,
            experience_suite: str | None = None, experience_share: float = 0.75,
            num_experiences: int = 3, experience_chars: int = 600) -> Path:
    """Fit a LoRA warm start; with ``experience_suite`` a share ``experience_share`` of the
    steps trains on that suite's references with J = ``num_experiences`` retrieved-style
    successes in the context (``lopd.sft_experience``), the rest on ``suite``'s as usual."""
    from rich.progress import Progress

    from lopd.chat import ChatRenderer
    from lopd.models import (
        LoraSpec,
        add_adapter,
        load_model,
        model_device,
        setup_runtime,
    )
    from lopd.prefix import sharing_pays_off

    setup_runtime(threads=threads, seed=seed)
    base, tokenizer = load_model(model, dtype="fp32", device=device)
    student = add_adapter(base, "default", LoraSpec(r=lora_r, alpha=2 * lora_r))
    renderer = ChatRenderer(tokenizer)
    data = reference_data(suite, n_tasks, renderer)
    pool = None
    if experience_suite:
        from lopd.envs import load_suite
        from lopd.sft_experience import build_pool, draw_rows, experience_backward

        pool = build_pool(load_suite(experience_suite, n=n_tasks_experience(n_tasks)), renderer,
                          experience_chars)
    params = [p for p in student.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr)
    rng = random.Random(seed)
    by_domain: dict[str, list] = {}
    for traj in data:
        by_domain.setdefault(traj.task.domain, []).append(traj)
    domains = sorted(by_domain)
    share = sharing_pays_off(model_device(student))
    losses: list[float] = []
    kinds: list[str] = []
    started = time.time()
    student.train()
    with Progress() as bar:
        job = bar.add_task("sft warm start", total=steps)
        for step in range(steps):
            optimizer.zero_grad(set_to_none=True)
            if pool is not None and _experience_step(step, experience_share):
                rows = draw_rows(pool, renderer, batch_size, num_experiences, rng, mixed_batches)
                loss = experience_backward(student, rows, tokenizer.pad_token_id, dtype)
                kinds.append("experience")
            else:
                source = data if mixed_batches else by_domain[rng.choice(domains)]
                chunk = rng.sample(source, min(batch_size, len(source)))
                loss = _plain_backward(student, chunk, tokenizer.pad_token_id, dtype, share)
                kinds.append("plain")
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            losses.append(float(loss))
            bar.update(job, advance=1, description=f"sft loss {losses[-1]:.3f}")
            if not bar.console.is_terminal:
                bar.console.print(f"sft step {len(losses)}/{steps}: loss {losses[-1]:.3f}")
    out = Path(out_dir)
    student.save_pretrained(out / "adapter")
    tokenizer.save_pretrained(out / "adapter")
    report = {"model": model, "suite": suite, "examples": len(data), "steps": steps,
              "batch_size": batch_size, "lr": lr, "lora_r": lora_r, "losses": losses,
              "batches": "mixed" if mixed_batches else "one domain per step",
              "experience_suite": experience_suite, "step_kinds": kinds,
              "experience_share": experience_share if experience_suite else 0.0,
              "num_experiences": num_experiences, "experience_chars": experience_chars,
              "seconds": round(time.time() - started, 1)}
    (out / "sft.json").write_text(json.dumps(report, indent=2))
    print(f"sft: loss {losses[0]:.3f} -> {losses[-1]:.3f}; adapter in {out / 'adapter'}")
    return out / "adapter"


def reference_data(suite: str, n_tasks: int, renderer) -> list:
    """The replayed reference trajectories of up to ``n_tasks`` tasks of ``suite`` that succeed;
    a clear error where the suite has no reference or none of them passes its checks."""
    from lopd.envs import load_suite
    from lopd.reference import reference_trajectory

    tasks = [t for t in load_suite(suite, n=n_tasks) if t.reference]
    if not tasks:
        raise ValueError(f"lopd sft needs reference solutions, and no task of suite {suite!r} "
                         "has one; add 'reference' to the tasks (see lopd.envs.taskfile)")
    data = [t for t in (reference_trajectory(t, renderer) for t in tasks) if t.success]
    if not data:
        raise ValueError(f"lopd sft: none of the {len(tasks)} reference solutions of suite "
                         f"{suite!r} succeeds when replayed (e.g. task {tasks[0].id!r}); check "
                         "the references against the tasks' checks")
    return data


def _plain_backward(student, chunk, pad_id: int, dtype: str, share: bool) -> float:
    """Back-propagate the SFT loss of one batch of reference trajectories; its value."""
    from lopd.models import autocast_context, model_device

    with autocast_context(dtype, model_device(student)):
        loss = sft_loss(student, chunk, pad_id, share)
    loss.backward()
    return float(loss.detach())


def _experience_step(step: int, share: float) -> bool:
    """Whether step ``step`` trains on experience rows: spread evenly, a share ``share``."""
    return int((step + 1) * share) > int(step * share)


def n_tasks_experience(n_tasks: int) -> int:
    """Experience-suite tasks drawn on: three times the plain suite's, so that every
    organisation has successes to retrieve besides the task's own."""
    return 3 * n_tasks

