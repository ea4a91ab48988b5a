"""What both sides of the lopd-vs-TRL benchmark share: paths, prompts, reward, demonstrations.

Both children build their inputs from these functions so that lopd and TRL see the same tasks in
the same order, score completions with the same ToolWorld reward and (SDFT) show the teacher the
same demonstration text; the process-level CPU and memory readings are the same on both sides
too.
"""

from __future__ import annotations

import resource
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
SCRIPT = ROOT / "benchmarks" / "bench_trl.py"  # each child reruns it with --child
BENCH_SITE = ROOT / ".bench-site"
TRL_INSTALL = ('.venv/bin/pip install --target .bench-site --no-deps trl==1.16.0 datasets==5.2.0 '
               'pyarrow pandas "dill<0.4.2" "multiprocess<0.70.20" xxhash')
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def bench_tasks(args) -> list:
    from lopd.envs import load_suite

    return load_suite("toolworld-train", n=args.prompts * (args.warmup + args.steps))


def toolworld_reward(task, text: str) -> float:
    """The shared reward: one ToolWorld turn, scored by the task's checklist."""
    from lopd.envs import make_env

    env = make_env(task, seed=0, max_steps=1)
    env.reset()
    return float(env.step(text).reward)


DEMO_MAX_STEPS = 30  # lopd's default rollout.max_steps


def demo_text(task, renderer) -> str:
    """The task's condensed reference trajectory, as lopd's SDFT builds its demonstrations.

    lopd plays the reference with ``rollout.max_steps`` turns, which is 1 in this benchmark; the
    benchmark rebuilds the demonstrations with the default 30 so the teacher sees the whole
    reference solution (on both sides).
    """
    from lopd.experience.condense import condense_trajectory
    from lopd.reference import reference_trajectory

    traj = reference_trajectory(task, renderer, DEMO_MAX_STEPS)
    return condense_trajectory(traj.messages, task.prompt)


def demo_block(task, renderer, chars: int) -> str:
    """The SDFT privileged text lopd shows its teacher (``lopd.contexts.text_context``)."""
    block = f"A demonstration of this task:\n{demo_text(task, renderer)}"
    block = block if len(block) <= chars else block[:chars] + " ..."
    return f"Privileged information:\n{block}"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
