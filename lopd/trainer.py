"""Algorithm 1 (LOPD) and every baseline in one readable loop.

Per step: sample tasks -> G student rollouts per task -> rewards -> bank update -> privileged
context (LOPD: retrieve + compose) -> the teacher re-scores exactly the student's tokens ->
losses -> update the student and the composer -> dual step on beta -> metrics -> periodic
held-out eval -> checkpoint.

Parts, not a framework: transformers + PEFT give the model (the student is a LoRA adapter on a
frozen base, so the base with adapters disabled *is* the teacher theta_bar; a fully fine-tuned
student gets a frozen copy), ``lopd.rollout`` the trajectories, ``lopd.contexts`` the
privileged context, ``lopd.methods`` the losses. The latent context is composed once per task
per step; micro-batches read a detached leaf copy of it and their gradients are accumulated
into it, then pushed through the composer once (with the anchor term), so the composer's
encoder runs once per step however many micro-batches there are.

Randomness is derived from (seed, step): task sampling and rollout sampling depend on nothing
else, so a resumed run repeats the uninterrupted one exactly (bit for bit on a CPU). What a
checkpoint does not hold is made identical instead: module train/eval modes (they select
kernels) are settled after building and restoring, the bank is rolled back to the checkpoint's
step, and the metrics log to it. Every run file is written atomically (``lopd.atomic``), and
damaged parts of a run directory are repaired on start (``lopd.run_dir``).
"""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path

import torch

from lopd import distributed, losses
from lopd.atomic import append_line, write_with
from lopd.batch import collate, gather_token_logprobs, kept_length
from lopd.checkpoint import latest_checkpoint
from lopd.config import Config, save_config
from lopd.contexts import StepContext, latent_context_diversity
from lopd.evaluate import evaluate_runtime
from lopd.methods import LossTerms, distill_loss, engine_logprobs, grpo_micro_loss
from lopd.run_dir import output_dir_problem, repair, start_over
from lopd.runtime import Runtime
from lopd.runtime_build import build_runtime
from lopd.runtime_store import restore_run, save_run
from lopd.types import Trajectory


class Trainer:
    def __init__(self, config: Config, resume: bool = False):
        distributed.init_from_launcher()
        self.config = config
        self.main = distributed.is_main()
        self.out = Path(config.run.out_dir)
        self.metrics_path = self.out / "metrics.jsonl"
        self.step = 0
        self.rollouts = 0
        self.beta = config.method.beta_init
        self.beta_history: list[float] = []
        created = not self.out.exists()
        try:
            self._start(resume)
        except Exception:
            if created and self.main:  # a failed start leaves no run directory behind
                shutil.rmtree(self.out, ignore_errors=True)
            raise
        self.writer = self.rt.tensorboard(self.out) if config.run.tensorboard and self.main else None

    def _start(self, resume: bool) -> None:
        """Check the run directory, repair or reset it, build the runtime, load the newest
        checkpoint under ``resume``; every module then in eval mode (``settle_modes``)."""
        problem = output_dir_problem(self.out)
        if problem is not None:
            raise NotADirectoryError(f"run.out_dir: {problem}; choose another run.out_dir")
        if resume and latest_checkpoint(self.out) is None:
            raise FileNotFoundError(f"--resume: no usable checkpoint under {self.out / 'checkpoints'}; "
                                    "start the run again without --resume")
        if self.main:
            self.out.mkdir(parents=True, exist_ok=True)
            repair(self.out)
            if not resume:
                start_over(self.out)
            write_with(self.out / "config.yaml", lambda path: save_config(self.config, path))
        self.rt: Runtime = build_runtime(self.config, self.out)
        if resume:
            self.step, self.rollouts, self.beta, self.beta_history = restore_run(self.rt)
        self.rt.settle_modes()

    # -- one step ------------------------------------------------------------------------------
    def sample_tasks(self, step: int):
        """The step's tasks from the (seed, step) stream; under data parallelism, this
        process's slice of them. With ``optim.one_domain_batches`` they all come from one
        domain, drawn from the same stream."""
        optim = self.config.optim
        tasks = step_tasks(self.rt.train_tasks, self.config.run.seed, step, optim.tasks_per_step,
                           optim.one_domain_batches)
        return distributed.shard(tasks)

    def train_step(self, step: int) -> dict:
        timings: dict[str, float] = {}
        started = time.perf_counter()
        tasks = self.sample_tasks(step)
        trajs = self.rt.rollout(tasks, step)
        timings["generate"] = time.perf_counter() - started
        self.rollouts += round(distributed.mean_scalar(len(trajs)) * distributed.world()[1])
        self.rt.update_bank(trajs, step)

        mark = time.perf_counter()
        with self.rt.whole(self.composer_backbone()):
            context = self.rt.context(trajs, step) if self.config.method.name != "grpo" else None
        timings["compose"] = time.perf_counter() - mark

        mark = time.perf_counter()
        terms, anchor = self.update(trajs, context, timings)
        timings["update"] = time.perf_counter() - mark - timings.get("teacher", 0.0)
        delta = distributed.mean_scalar(terms.delta / max(terms.rows, 1))
        if self.config.method.name == "lopd" and distributed.mean_scalar(terms.rows) > 0:
            self.beta = losses.dual_update(self.beta, self.config.method.margin, delta,
                                           self.config.method.beta_lr)
        self.beta_history.append(self.beta)
        timings["total"] = time.perf_counter() - started
        metrics = self.step_metrics(step, trajs, terms, delta, anchor, timings)
        metrics.update(latent_context_diversity(context, self.config.method.latent_tokens))
        return metrics

    def update(self, trajs: list[Trajectory], context: StepContext | None,
               timings: dict[str, float]) -> tuple[LossTerms, float]:
        cfg, rt = self.config, self.rt
        method = cfg.method.name
        rt.zero_grad()
        device = rt.device
        active = context.active if context is not None else torch.ones(len(trajs), dtype=torch.bool)
        active = active.to(device)
        leaf = None
        if context is not None and context.task_latent is not None:
            leaf = context.task_latent.detach().requires_grad_(rt.composer_opt is not None)
        advantages = (grpo_advantages(trajs, self.config.method.advantage_std).to(device)
                      if method == "grpo" else None)
        with rt.checkpointing():
            total = self._accumulate(trajs, context, leaf, active, advantages, timings)
            with rt.whole(self.composer_backbone()):
                anchor = rt.composer_backward(context, leaf) if leaf is not None else 0.0
        rt.optimizer_step()
        return total, anchor

    def composer_backbone(self):
        """The frozen model the composer encodes with, when it is a sharded teacher copy (its
        data-dependent forwards then run on gathered weights, ``Runtime.whole``)."""
        return self.rt.teacher_model if self.rt.composer is not None else None

    def _accumulate(self, trajs, context, leaf, active, advantages, timings) -> LossTerms:
        """Forward + backward of every micro-batch (gradients add up); the summed terms."""
        cfg, rt = self.config, self.rt
        method, device = cfg.method.name, rt.device
        rows_in_step = int(active.sum())
        total = LossTerms(objective=torch.zeros(()))
        lockstep = rt.sharded  # FSDP: every process runs every micro-batch (lopd.fsdp)
        for rows in micro_batches(trajs, active, advantages, cfg.optim, lockstep):
            batch = collate([trajs[r] for r in rows], rt.pad_id,
                            through_last_action=cfg.optim.trim_after_last_action).to(device)
            targets = batch.targets[batch.target_mask]
            row_of = batch.target_mask.nonzero()[:, 0]
            engine_lp = engine_logprobs([trajs[r] for r in rows], device)  # vLLM's, else None
            with rt.autocast():
                student, teacher = rt.student_logits(batch), None
                if method == "grpo":
                    terms = grpo_micro_loss(student, targets, row_of, advantages[rows],
                                            rows_in_step, cfg.method.clip_eps, engine_lp,
                                            cfg.rollout.importance_cap)
                else:
                    mark = time.perf_counter()
                    teacher = rt.teacher_logits(batch, context, rows, leaf)
                    timings["teacher"] = timings.get("teacher", 0.0) + time.perf_counter() - mark
                    signal = torch.tensor([trajs[r].advantage_signal for r in rows], device=device)
                    terms = distill_loss(method, student, teacher, targets, row_of,
                                         active[rows], signal, self.beta, rows_in_step,
                                         cfg.method.top_m, cfg.method.jsd_beta)
            if lockstep:  # both models run their backward (and collectives), signal or not
                terms.objective = terms.objective + _zero_term(student, teacher)
            if terms.rows or lockstep:
                terms.objective.backward()
            total.distill += terms.distill
            total.delta += terms.delta
            total.rows += terms.rows
            if engine_lp is not None:  # the engine-vs-trainer gap on the sampled tokens
                with torch.no_grad():
                    total.add_engine_gap(gather_token_logprobs(student, targets), engine_lp)
        return total

    def step_metrics(self, step, trajs, terms, delta, anchor, timings) -> dict:
        n = max(len(trajs), 1)
        metrics = {
            "step": step, "rollouts": self.rollouts, "processes": distributed.world()[1],
            "reward": sum(t.reward for t in trajs) / n,
            "success": sum(t.success for t in trajs) / n,
            "distill": terms.distill / max(terms.rows, 1), "delta": delta, "beta": self.beta,
            "anchor": anchor, "signal_rows": terms.rows,
            "action_tokens": sum(sum(t.action_mask) for t in trajs),
            "bank_rows": self.rt.bank_size(),
        }
        for key in ("interaction_steps", "tool_calls_per_step", "first_response_tokens",
                    "reward_per_tool_call"):
            metrics[key] = sum(t.stats.get(key, 0.0) for t in trajs) / n
        if terms.gap_tokens:  # log p_trainer - log p_engine over the forwarded sampled tokens
            metrics["engine_gap"] = terms.gap / terms.gap_tokens
            metrics["engine_gap_abs"] = terms.gap_abs / terms.gap_tokens
        metrics.update({f"time/{k}": round(v, 3) for k, v in timings.items()})
        return metrics

    # -- bookkeeping -----------------------------------------------------------------------------
    def log(self, metrics: dict) -> None:
        if not self.main:
            return
        append_line(self.metrics_path, json.dumps(metrics))
        if self.writer is not None:
            for key, value in metrics.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.writer.add_scalar(key, value, metrics["step"])
            self.writer.flush()

    def checkpoint(self) -> Path | None:
        path = None
        if self.main or self.rt.sharded:  # sharded: every process writes its shards
            path = save_run(self.rt, self.step, self.rollouts, self.beta, self.beta_history)
        distributed.barrier()
        return path

    def evaluate(self) -> dict:
        """Held-out evaluation (main process only; the others help gather a sharded student)."""
        with self.rt.whole(self.rt.model):
            summary = evaluate_runtime(self.rt) if self.main else {}
        if not self.main:
            return {}
        record = {"step": self.step, "rollouts": self.rollouts, **{
            f"eval/{k}": v for k, v in summary.items() if isinstance(v, (int, float))}}
        self.log(record)
        return summary

    def fit(self) -> list[dict]:
        """Run the remaining steps with a progress bar; returns the step metrics."""
        from rich.progress import (
            BarColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        cfg = self.config
        history = []
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[status]}"))
        with Progress(*columns, disable=not self.main) as bar:
            job = bar.add_task(f"{cfg.method.name} training", total=cfg.optim.steps,
                               completed=self.step, status="")
            while self.step < cfg.optim.steps:
                metrics = self.train_step(self.step)
                self.step += 1
                self.log(metrics)
                history.append(metrics)
                status = step_status(cfg.method.name, metrics)
                bar.update(job, completed=self.step, status=status)
                if not bar.console.is_terminal and self.main:  # logs to a file: one line a step
                    bar.console.print(f"step {self.step}/{cfg.optim.steps}: {status}")
                if cfg.run.eval_every and self.step % cfg.run.eval_every == 0:
                    self.evaluate()
                if self.step % cfg.run.checkpoint_every == 0 or self.step == cfg.optim.steps:
                    self.checkpoint()
        return history


def step_status(method: str, metrics: dict) -> str:
    """The progress line of one step, with the quantities ``method`` has: GRPO has no teacher
    (the rows with a non-zero group advantage instead of a divergence), the distillation
    baselines no margin, LOPD its privilege Delta and dual variable beta."""
    parts = [f"reward {metrics['reward']:.2f}"]
    if method == "grpo":
        parts.append(f"signal rows {metrics['signal_rows']}")
    else:
        parts.append(f"distill {metrics['distill']:.3f}")
    if method == "lopd":
        parts.append(f"delta {metrics['delta']:+.3f} beta {metrics['beta']:.3f}")
    return " ".join(parts) + f" ({metrics['time/total']:.0f} s)"


def _zero_term(*outputs: torch.Tensor | None) -> torch.Tensor:
    """Zero times every differentiable output: no gradient changes, but each model that made
    one takes part in the backward."""
    return sum((out.sum() * 0.0 for out in outputs if out is not None and out.requires_grad),
               torch.zeros(()))


def signal_rows(active: torch.Tensor, advantages: torch.Tensor | None) -> list[int]:
    """The rows whose loss has a gradient, in order: rows with privileged context (distillation)
    or a non-zero group advantage (GRPO; a group whose rollouts all scored the same has none).
    Only these are forwarded, packed into full micro-batches; the loss is still normalised by
    the step's ``rows_in_step``, so skipping the others changes no gradient."""
    keep = active.bool().cpu()
    if advantages is not None:
        keep = keep & (advantages.detach().cpu() != 0)
    return keep.nonzero().squeeze(-1).tolist()


def step_tasks(pool: list, seed: int, step: int, tasks_per_step: int, one_domain: bool) -> list:
    """The tasks of training step ``step``: a sample from the (seed, step) stream, all from one
    domain (itself drawn from the stream) when ``one_domain``. Pure, so studies can list a run's
    task stream without building a trainer."""
    rng = random.Random(seed * 1_000_003 + step)
    if one_domain:
        domain = rng.choice(sorted({task.domain for task in pool}))
        pool = [task for task in pool if task.domain == domain]
    return rng.sample(pool, min(tasks_per_step, len(pool)))


def grpo_advantages(trajs: list[Trajectory], normalize_std: bool = True) -> torch.Tensor:
    """(B,) group-relative advantages of the step's rollouts (``method.advantage_std``)."""
    return losses.group_advantages(torch.tensor([t.reward for t in trajs]),
                                   torch.tensor([t.group for t in trajs]), normalize_std)


def micro_batches(trajs: list[Trajectory], active: torch.Tensor, advantages: torch.Tensor | None,
                  optim, lockstep: bool = False) -> list[list[int]]:
    """The rows of each micro-batch: every row under ``lockstep``, else the rows with a signal;
    under ``optim.length_sorted`` in (task group, length) order; ``optim.micro_batch`` a piece."""
    rows = list(range(len(trajs))) if lockstep else signal_rows(active, advantages)
    if optim.length_sorted:
        rows = by_group_and_length(trajs, rows)
    return [rows[start:start + optim.micro_batch] for start in range(0, len(rows), optim.micro_batch)]


def by_group_and_length(trajs: list[Trajectory], rows: list[int]) -> list[int]:
    """``rows`` ordered by (task group, tokens): micro-batches cut from this order pad less,
    and keep a task's rollouts together for the shared-prefix forwards."""
    return sorted(rows, key=lambda row: (trajs[row].group, kept_length(trajs[row])))


def train(config: Config, resume: bool = False) -> Trainer:
    """`lopd train`: build everything, run the steps, evaluate at the end."""
    trainer = Trainer(config, resume=resume)
    trainer.fit()
    if config.data.eval_tasks >= 0 and not config.run.eval_every:
        trainer.evaluate()
    if trainer.main:
        print(f"run directory: {trainer.out}")
    return trainer
