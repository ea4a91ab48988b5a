"""`lopd demo` (`make demo`): a short training run on the embedded SmolLM2-135M-Instruct with
held-out ToolWorld success measured before and after it.

warm start -> held-out eval (the 200 tasks of the tier-1 test split, greedy) -> training steps
-> the same held-out eval -> a report (``report.md``: success before and after with standard
errors and the paired gain; ``reward_curve.png``: train reward per step with the two held-out
points) in the run directory.

The warm start is the adapter the learning sweep starts from, kept in the repository
(``benchmarks/results/learning/warm-start-adapter``); outside a checkout, `lopd sft` builds one.
The training setting is the one the sweep measured to learn (benchmarks/RESULTS.md) at half its
LoRA lr (``STUDENT_LR``): sampling temperature 0.7, tier-1 training tasks (one tool call in the
reference solution), 4 tasks x 8 rollouts per step, 3 turns per training episode; each step's
tasks from any domain (``ONE_DOMAIN_NOTE``). Sized for well under 15 minutes on a 2-core CPU
with rollouts on vLLM (``rollout.backend=auto``); on lopd's HF loop the same 8 steps took 15.9
min in fp32. ``--quick`` shrinks everything to a smoke test on the tiny random model.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from lopd.config import Config, validate
from lopd.evaluate import paired_gain

WARM_START = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "learning" / "warm-start-adapter"
"""The sweep's committed warm start (present in a repository checkout)."""

SFT_STEPS = {True: 2, False: 30}  # 16 steps left held-out success at 0/8, 30 steps gave 0.25
STEPS = 8
"""Training steps of the full demo (256 rollouts) at ``STUDENT_LR``: on the 200 held-out tier-1
tasks this learner, with the turn cap scored 0 (``CAP_NOTE``), gained +0.135 to +0.260 (3.8 to
7.6 SE) over seeds 0-5, where 16 steps (512 rollouts, cap unscored) gained +0.120 to +0.290
and lost a domain in a third of the runs (benchmarks/results/studies/demo_seeds.md). vLLM's
CPU sampler does not repeat across processes, so each demo is a fresh draw of the training
noise."""
STUDENT_LR = 2.5e-4
"""LoRA learning rate of the demo, half the learning sweep's 5e-4: at 8 steps the sweep's rate
gained +0.135 to +0.180 over the same seeds, and at 16 steps one `make demo` at 5e-4 lost
-0.125 +- 0.033 when its student learnt to cancel the flights it booked
(benchmarks/results/demo)."""
CAP_NOTE = """Training episodes the turn cap ends while the student is still calling score 0
(``rollout.score_truncated=false``): the demo's learner otherwise learnt to keep calling after
the task was done, which on the held-out bookings means cancelling the flight it just booked
(seed 3 lost its travel tasks, 26 -> 0 of 33, and the paired gain was -0.070 +- 0.039; with
the cap scored 0 the same seed gained +0.225 +- 0.034; benchmarks/results/demo)."""
EVAL_SUITE = "toolworld-test-tier1"
"""The demo's held-out tasks: the 200 of the tier-1 test split, the tier the demo trains on
(one tool call in the reference solution), none equal to a training prompt. GRPO's gain at
this setting lies in tier 1 (benchmarks/results/studies/gain_by_tier.md: 2 to 5 of the 120
tier 2-5 tasks change outcome per run), so tasks of other tiers only add evaluation time."""
ONE_DOMAIN_NOTE = """Each step draws its 4 tasks from any training domain. The learning sweep
drew them from one domain a step (``optim.one_domain_batches``, which lets the update share one
system prompt across every row); at the demo's 512 rollouts that learner gained +0.040 +- 0.044
on the tier-1 test split (seed 0), against +0.165 to +0.305 (3.9 to 9.2 SE) over seeds 0-2
and fp32 with mixed-domain steps (benchmarks/results/studies/demo_seeds.md)."""
EVAL_TURNS = 3
"""Turn cap of the demo's held-out episodes: a tier-1 task is solved in 2 turns and a tier-2
task in 3; failed episodes, which set the evaluation's length, stop 3 turns earlier than the
sweep's 6."""
EVAL_TOKENS = 64
"""New tokens per held-out turn (training keeps the sweep's 96). On the demo's 100 tasks 3
turns x 64 tokens took 0.78x the time of 4 x 96 and changed one outcome
(benchmarks/results/demo_eval_turns.md)."""


def demo_config(out: Path, quick: bool, method: str = "grpo", steps: int = 0,
                dtype: str = "auto", seed: int = 0) -> Config:
    """The sweep's learning setting at the demo's budget (``dtype`` auto: fp32 on a CPU without
    fast bf16, bf16 autocast where it is fast; fp32 reproduces the former anywhere)."""
    config = Config()
    config.model.dtype = dtype
    config.method.name = method
    config.run.seed = seed
    config.run.out_dir = str(out / method)
    steps = steps or (2 if quick else STEPS)
    config.run.checkpoint_every = steps
    config.data.train_max_tier = 1
    config.data.eval_suite = "toolworld-test" if quick else EVAL_SUITE
    config.data.eval_tasks = 6 if quick else 200
    config.data.eval_batch = 100
    config.optim.steps = steps
    config.optim.tasks_per_step = 2 if quick else 4
    config.optim.group_size = 2 if quick else 8
    config.optim.micro_batch = 4 if quick or method != "grpo" else 8
    config.optim.one_domain_batches = False  # mixed-domain steps: see ONE_DOMAIN_NOTE
    config.optim.student_lr = STUDENT_LR
    config.method.seed_experiences = 20 if quick else 60
    config.method.cold_start_steps = 3 if quick else 8
    config.rollout.max_steps = 6 if quick else EVAL_TURNS
    config.rollout.train_max_steps = 3
    config.rollout.score_truncated = False  # see CAP_NOTE
    config.rollout.max_new_tokens = 24 if quick else 96
    config.rollout.eval_max_new_tokens = 0 if quick else EVAL_TOKENS
    config.rollout.temperature = 0.7
    if quick:
        config.model.name = "tiny-random"
        config.method.latent_tokens = 4
        config.run.tensorboard = False
    return validate(config)


def warm_start(out: Path, config: Config, quick: bool) -> str:
    """The committed warm start for the default model, else a fresh `lopd sft` adapter."""
    if not quick and (WARM_START / "adapter_model.safetensors").is_file():
        print(f"[1/4] warm start: {WARM_START}")
        return str(WARM_START)
    from lopd.sft import run_sft

    print(f"[1/4] warm start on reference trajectories -> {out / 'sft'}")
    return str(run_sft(model=config.model.name, out_dir=str(out / "sft"), steps=SFT_STEPS[quick],
                       n_tasks=40 if quick else 400, threads=config.run.threads,
                       device=config.model.device))


def reward_curve(metrics_path: Path, png: Path, method: str) -> None:
    """Train reward per step (rollouts consumed) and held-out success before and after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line]
    train = [r for r in rows if "reward" in r]
    held = [r for r in rows if "eval/success" in r]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["rollouts"] for r in train], [r["reward"] for r in train], marker="o",
            label="train reward")
    ax.plot([r["rollouts"] for r in held], [r["eval/success"] for r in held], marker="s",
            linestyle="--", label="held-out success")
    ax.set_xlabel("rollouts consumed")
    ax.set_ylabel("reward / success")
    ax.set_title(f"{method.upper()} on ToolWorld (SmolLM2-135M)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def run_demo(out_dir: str = "runs/demo", quick: bool = False, method: str = "grpo",
             steps: int = 0, dtype: str = "auto", seed: int = 0) -> Path:
    from lopd.trainer import Trainer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    config = demo_config(out, quick, method, steps, dtype, seed)
    config.model.init_adapter = warm_start(out, config, quick)
    print(f"[2/4] building the {method} trainer; held-out eval before training "
          f"({config.data.eval_tasks} tasks)")
    trainer = Trainer(config)
    before = trainer.evaluate()
    print(f"      success {before['success']:.3f} +- {before['success_se']:.3f}")
    print(f"[3/4] {config.optim.steps} {method} steps")
    trainer.fit()
    trainer.checkpoint()
    print("[4/4] held-out eval after training")
    after = trainer.evaluate()
    print(f"      success {after['success']:.3f} +- {after['success_se']:.3f}")
    png = out / "reward_curve.png"
    reward_curve(trainer.metrics_path, png, method)
    report = write_report(out, config, before, after, trainer, time.time() - started)
    print(f"report: {report}\nplot: {png}")
    return report


def write_report(out: Path, config: Config, before: dict, after: dict, trainer, seconds: float) -> Path:
    gain, gain_se, _ = paired_gain(after["per_task"], before["per_task"])
    name = config.method.name
    lines = [
        "# lopd demo", "",
        (f"Model {config.model.name} from its LoRA warm start, ToolWorld; {config.optim.steps} "
         f"{name} steps x {config.optim.tasks_per_step} tier-1 tasks x "
         f"{config.optim.group_size} rollouts, LoRA lr {config.optim.student_lr:g}, "
         f"temperature {config.rollout.temperature:g}, seed {config.run.seed}; wall time {seconds / 60:.1f} min."), "",
        (f"| held-out `{config.data.eval_suite}` ({before['n']} tasks, greedy, {config.rollout.max_steps} "
         f"turns x {config.rollout.eval_tokens} "
         "tokens) | success | mean reward |"),
        "|---|---|---|",
        f"| warm start | {before['success']:.3f} +- {before['success_se']:.3f} | {before['reward']:.3f} |",
        f"| after {name} | {after['success']:.3f} +- {after['success_se']:.3f} | {after['reward']:.3f} |",
        "",
        f"Paired gain on the same tasks: {gain:+.3f} +- {gain_se:.3f} (standard error).", "",
    ]
    coldstart = Path(config.run.out_dir) / "coldstart.json"
    cs = json.loads(coldstart.read_text()) if coldstart.exists() else {}
    if "heldout_nll_context" in cs:
        lines += [(f"Cold start: held-out teacher NLL per action token "
                   f"{cs['heldout_nll_no_context']:.3f} without latent context, "
                   f"{cs['heldout_nll_context']:.3f} with it."), ""]
    lines += ["![reward curve](reward_curve.png)", "",
              f"Metrics: `{trainer.metrics_path}`; checkpoints under `{trainer.out / 'checkpoints'}`."]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    (out / "heldout.json").write_text(json.dumps(  # per task, for re-analysis (tiers, pairs)
        {"gain": gain, "gain_se": gain_se, "before": before["per_task"],
         "after": after["per_task"]}, indent=1))
    return path
