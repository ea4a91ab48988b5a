"""The three sizes of every experiment and the cost model behind the planned wall time.

- ``quick``: the tiny random model, 1-2 steps of 2 tasks x 2 rollouts, a handful of held-out
  tasks; only checks that the scripts run end to end (CI, ``tests/test_experiments.py``).
  Its numbers mean nothing: the tiny model never solves a task.
- ``laptop``: SmolLM2-135M-Instruct on a 2-core CPU (fp32), starting from the ``lopd sft``
  LoRA warm start ("vanilla"); budgets sized so the whole sweep fits in about 1.5 hours.
- ``paper``: the Qwen3-4B preset (``configs/qwen3-4b-gpu.yaml``: J=3, K=32, M=20, m=0.05,
  30-step cap, 32 tasks x 8 rollouts a step) for GPUs; pass the model directory with
  ``--model``.

Costs (``Cost``) are measured on the 2-core dev box (``benchmarks/results/step_time.md``,
the demo and the warm-start eval) and only feed the estimate printed before a sweep starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"


@dataclass(frozen=True)
class Cost:
    """Seconds of the parts of a sweep, for the planned wall time (``None`` = unknown)."""

    step_s: dict[str, float]
    """One training step of ``per_step_rollouts`` rollouts, per method."""
    per_step_rollouts: int
    run_overhead_s: float
    """Model load, optimiser set-up, checkpoints: per run."""
    cache_s: float
    """Bank seeding + composer cold start, once per (seed, K, J)."""
    eval_s_per_task: dict[str, float]
    """Held-out evaluation, per suite."""
    probe_s: float
    """Teacher-NLL probe at the end of an ablation run."""
    sft_s: float
    """The `lopd sft --steps 30` warm start, if its adapter is missing."""


@dataclass(frozen=True)
class Scale:
    name: str
    seeds: tuple[int, ...]
    steps: int
    """Training steps of every efficiency / method-table run (the equal rollout budget)."""
    ablation_steps: int
    eval_tasks: int
    """Held-out ToolWorld tasks (the first N of toolworld-test; 0 = all 200)."""
    bfcl_tasks: int
    """BFCL multi-turn tasks per category in the held-out eval (0 = off, -1 = all)."""
    humaneval_tasks: int
    """HumanEval problems for the code preset (0 = all 164)."""
    k_values: tuple[int, int]
    """(ablation K, default K): latent tokens per experience."""
    j_values: tuple[int, int]
    """(ablation J, default J): experiences retrieved per task."""
    presets: tuple[str, ...]
    """Presets of the method table run by default (toolworld, code)."""
    isolate: bool
    """One subprocess per run (clean peak memory, no leaks across a long sweep)."""
    init_adapter: str
    """Default warm start of the ToolWorld preset ("" = none)."""
    base: dict[str, str]
    """Base YAML config per preset."""
    overrides: dict[str, tuple[str, ...]]
    """Config overrides of every run, per preset."""
    ablation_overrides: tuple[str, ...] = ()
    """Extra overrides of the ablation runs (a smaller per-step batch)."""
    cost: Cost | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


_COMMON_SMALL = ("run.tensorboard=false", "run.checkpoint_every=1", "run.keep_checkpoints=1",
                 "run.eval_every=0")

_SMOLLM2_BASE = {"toolworld": str(CONFIGS / "toolworld-smollm2.yaml"),
                 "code": str(CONFIGS / "code-smollm2.yaml")}

QUICK = Scale(
    name="quick", seeds=(0, 1), steps=2, ablation_steps=1, eval_tasks=3, bfcl_tasks=0,
    humaneval_tasks=2, k_values=(2, 4), j_values=(1, 2), presets=("toolworld",),
    isolate=False, init_adapter="",
    base=_SMOLLM2_BASE,
    overrides={
        "toolworld": ("model.name=tiny-random", "model.dtype=fp32", "optim.tasks_per_step=2",
                      "optim.group_size=2", "optim.micro_batch=2", "rollout.max_steps=2",
                      "rollout.max_new_tokens=8", "data.max_train_tasks=40", "data.eval_tasks=1",
                      "method.latent_tokens=4", "method.num_experiences=2",
                      "method.seed_experiences=10", "method.cold_start_steps=1",
                      "method.experience_chars=160", "run.threads=1", *_COMMON_SMALL),
        "code": ("model.name=tiny-random", "model.dtype=fp32", "optim.tasks_per_step=2",
                 "optim.group_size=2", "optim.micro_batch=2", "rollout.max_new_tokens=8",
                 "data.max_train_tasks=40", "data.eval_tasks=1", "method.latent_tokens=4",
                 "method.num_experiences=2", "method.seed_experiences=10",
                 "method.cold_start_steps=1", "method.experience_chars=160", "run.threads=1",
                 *_COMMON_SMALL),
    },
    cost=Cost(step_s=dict.fromkeys(("lopd", "grpo", "sdft", "opsd", "sdpo", "skill-sd"), 0.5),
              per_step_rollouts=4, run_overhead_s=0.5, cache_s=2.0,
              eval_s_per_task={"toolworld-test": 0.05, "humaneval": 0.2,
                               "bfcl-multi-turn": 0.5},
              probe_s=0.2, sft_s=5.0),
    notes=(("quick scale: the tiny random model never solves a task; the numbers only show "
           "that every script runs."),),
)

LAPTOP = Scale(
    name="laptop", seeds=(0, 1), steps=4, ablation_steps=3, eval_tasks=24, bfcl_tasks=0,
    humaneval_tasks=40, k_values=(8, 32), j_values=(1, 3), presets=("toolworld",),
    isolate=True, init_adapter="runs/sft/adapter",
    base=_SMOLLM2_BASE,
    overrides={
        "toolworld": ("optim.tasks_per_step=2", "optim.group_size=4", "optim.micro_batch=4",
                      "rollout.max_steps=4", "rollout.max_new_tokens=64", "data.eval_tasks=1",
                      "method.latent_tokens=32", "method.num_experiences=3",
                      "method.seed_experiences=60", "method.cold_start_steps=5",
                      "run.threads=2", *_COMMON_SMALL),
        "code": ("optim.tasks_per_step=2", "optim.group_size=4", "optim.micro_batch=4",
                 "rollout.max_new_tokens=192", "data.eval_tasks=1", "method.latent_tokens=32",
                 "method.num_experiences=3", "method.seed_experiences=60",
                 "method.cold_start_steps=5", "run.threads=2", *_COMMON_SMALL),
    },
    ablation_overrides=("optim.tasks_per_step=1", "optim.group_size=2"),
    cost=Cost(step_s={"lopd": 90.0, "grpo": 60.0, "skill-sd": 80.0, "sdft": 80.0,
                      "opsd": 80.0, "sdpo": 70.0},
              per_step_rollouts=8, run_overhead_s=15.0, cache_s=240.0,
              eval_s_per_task={"toolworld-test": 3.0, "humaneval": 6.0,
                               "bfcl-multi-turn": 90.0},
              probe_s=30.0, sft_s=540.0),
    notes=(("laptop scale: SmolLM2-135M-Instruct, fp32 on 2 CPU cores; \"vanilla\" is the "
           "`lopd sft --steps 30` LoRA warm start, the starting point of every method."),
           ("BFCL multi-turn is off by default at this scale (prompts of ~5k tokens; vanilla "
           "SmolLM2 scores ~0): add `--bfcl N` for N tasks per category."),
           ("The code preset (HumanEval pass@1) is off by default at this scale: add "
           "`--presets toolworld,code`.")),
)

PAPER = Scale(
    name="paper", seeds=(0, 1, 2), steps=300, ablation_steps=300, eval_tasks=0, bfcl_tasks=-1,
    humaneval_tasks=0, k_values=(8, 32), j_values=(1, 3), presets=("toolworld", "code"),
    isolate=True, init_adapter="",
    base={"toolworld": str(CONFIGS / "qwen3-4b-gpu.yaml"),
          "code": str(CONFIGS / "qwen3-4b-gpu.yaml")},
    overrides={
        "toolworld": ("run.eval_every=0",),
        "code": ("data.train_suite=code-train", "data.eval_suite=humaneval",
                 "rollout.max_steps=1", "rollout.max_new_tokens=16384",
                 "rollout.max_context_tokens=20480", "run.eval_every=0"),
    },
    notes=(("paper scale: the Qwen3-4B preset (configs/qwen3-4b-gpu.yaml) with the model "
           "directory given by --model."),),
)

SCALES = {s.name: s for s in (QUICK, LAPTOP, PAPER)}
