"""What the benchmark plugs into TRL's trainers to measure their steps the way lopd's are measured.

TRL's ``Trainer.train()`` runs the steps itself, so the TRL child observes them from outside: a
callback marks each step's start and end (wall and CPU seconds, torch threads), wrappers around
the trainers' own methods time generation, reward and (SDFT) the teacher forward and count the
generated tokens, and the reward function records which tasks a step saw. Everything lands in a
``StepTimings`` that the TRL child turns into per-step records.
"""

from __future__ import annotations

import contextlib
import time

from benchmarks.trl_bench.common import cpu_seconds, toolworld_reward


class StepTimings:
    """TRL's steps as measured: ``current`` is the step in progress (None between steps, so
    nothing outside a step is counted) and ``steps`` the finished ones, in order."""

    def __init__(self) -> None:
        self.current: dict | None = None
        self.steps: list[dict] = []

    def begin(self) -> None:
        self.current = {"split": {}, "tokens_generated": 0, "t0": time.perf_counter(),
                        "cpu0": cpu_seconds()}

    def end(self, threads: int) -> None:
        cur = self.current
        now = time.perf_counter()
        cur["seconds"] = now - cur.pop("t0")
        cur["cpu_seconds"] = cpu_seconds() - cur.pop("cpu0")
        cur["end"] = now
        cur["threads"] = threads
        self.steps.append(cur)
        self.current = None

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to the current step's time split under ``name``."""
        if self.current is not None:
            split = self.current["split"]
            split[name] = split.get(name, 0.0) + seconds

    def timed(self, name, fn, after=None):
        """``fn`` wrapped so that its time counts as ``name``; ``after(step, result)`` then
        records more from its result (e.g. tokens generated)."""
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            out = fn(*a, **k)
            if self.current is not None:
                self.add(name, time.perf_counter() - t0)
                if after:
                    after(self.current, out)
            return out
        return wrapper


def step_timer_callback(timings: StepTimings):
    """A ``transformers.TrainerCallback`` that opens and closes a step in ``timings``."""
    import torch
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            timings.begin()

        def on_step_end(self, a, state, control, **kw):
            timings.end(torch.get_num_threads())

    return StepTimer()


def toolworld_reward_func(by_id: dict, timings: StepTimings):
    """TRL reward function: the shared ToolWorld reward of each completion; also records the
    step's task ids (in order of first appearance) and rewards."""
    def reward_func(prompts, completions, task_id, **kwargs):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        rewards = [toolworld_reward(by_id[i], text) for i, text in zip(task_id, texts)]
        if timings.current is not None:
            timings.current["task_ids"] = sorted(set(task_id), key=task_id.index)
            timings.current["rewards"] = rewards
        return rewards

    return reward_func


def count_generated_tokens(step: dict, out) -> None:
    """``_generate`` returns (prompt_ids, completion_ids, ...): count the completion tokens."""
    step["tokens_generated"] += sum(len(c) for c in out[1])


def time_generation(trainer, timings: StepTimings) -> None:
    trainer._generate = timings.timed("generate", trainer._generate, count_generated_tokens)


def time_sdft_teacher(trainer, timings: StepTimings) -> None:
    """SDFT: time the teacher forward (it runs inside the trainer's teacher context) and record
    how many privileged-context tokens each teacher row gets."""
    import torch

    original_context = trainer._get_teacher_context_for_self_distillation

    @contextlib.contextmanager
    def teacher_context():
        t0 = time.perf_counter()
        with original_context():
            yield
        timings.add("teacher", time.perf_counter() - t0)

    trainer._get_teacher_context_for_self_distillation = teacher_context
    builder = trainer.teacher_context_builder
    original_build = builder.build

    def build(prompts, privileged_contexts, completion_ids, completion_mask):
        out = original_build(prompts, privileged_contexts, completion_ids, completion_mask)
        cur = timings.current
        if cur is not None:  # teacher prompt tokens minus student prompt tokens, per row
            teacher_prompt = out["teacher_attention_mask"].sum(1) - completion_mask.sum(1)
            student_prompt = torch.tensor([len(i) for i in trainer._tokenize_prompts(prompts)])
            cur["privileged_context_tokens"] = float(
                (teacher_prompt - student_prompt).float().mean())
        return out

    builder.build = build
