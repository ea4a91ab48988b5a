"""`lopd demo` (`make demo`): the whole pipeline on the embedded SmolLM2-135M-Instruct.

warm start (`lopd sft`, see lopd.sft for why) -> held-out eval of that "vanilla" checkpoint ->
seed the bank -> cold-start the composer -> LOPD steps -> held-out eval again -> a report
(``report.md``, ``reward_curve.png``) in the run directory. Sized for a 2-core CPU; ``--quick``
shrinks everything to a smoke test on the tiny random model.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from lopd.config import Config, validate


def demo_config(out: Path, quick: bool) -> Config:
    """Sized for ~20 minutes on a 2-core CPU without fast bf16 (fp32 throughout)."""
    config = Config()
    config.run.out_dir = str(out / "lopd")
    config.run.checkpoint_every = 2
    config.data.eval_tasks = 6 if quick else 16
    config.optim.steps = 2 if quick else 3
    config.optim.tasks_per_step = 2
    config.optim.group_size = 2 if quick else 4
    config.method.seed_experiences = 20 if quick else 60
    config.method.cold_start_steps = 3 if quick else 8
    config.rollout.max_steps = 6
    config.rollout.max_new_tokens = 24 if quick else 96
    config.rollout.temperature = 1.0
    if quick:
        config.model.name = "tiny-random"
        config.method.latent_tokens = 4
        config.run.tensorboard = False
    return validate(config)


SFT_STEPS = {True: 2, False: 30}  # 16 steps left held-out success at 0/8, 30 steps gave 0.25


def reward_curve(metrics_path: Path, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line]
    train = [r for r in rows if "reward" in r]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["rollouts"] for r in train], [r["reward"] for r in train], marker="o", label="train reward")
    ax.set_xlabel("rollouts consumed")
    ax.set_ylabel("mean reward")
    ax.set_title("LOPD on ToolWorld (SmolLM2-135M)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def run_demo(out_dir: str = "runs/demo", quick: bool = False) -> Path:
    from lopd.sft import run_sft
    from lopd.trainer import Trainer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    config = demo_config(out, quick)
    print(f"[1/4] warm start on reference trajectories -> {out / 'sft'}")
    adapter = run_sft(model=config.model.name, out_dir=str(out / "sft"),
                      steps=SFT_STEPS[quick], n_tasks=40 if quick else 400,
                      threads=config.run.threads, device=config.model.device)
    config.model.init_adapter = str(adapter)
    print("[2/4] LOPD run: seed bank, cold start, build trainer")
    trainer = Trainer(config)
    print("[2/4] held-out eval before LOPD")
    before = trainer.evaluate()
    print(f"      success {before['success']:.3f}, reward {before['reward']:.3f}")
    print(f"[3/4] {config.optim.steps} LOPD steps")
    trainer.fit()
    trainer.checkpoint()
    print("[4/4] held-out eval after LOPD")
    after = trainer.evaluate()
    png = out / "reward_curve.png"
    reward_curve(trainer.metrics_path, png)
    report = write_report(out, config, before, after, trainer, time.time() - started)
    print(f"report: {report}\nplot: {png}")
    return report


def write_report(out: Path, config: Config, before: dict, after: dict, trainer, seconds: float) -> Path:
    coldstart = Path(config.run.out_dir) / "coldstart.json"
    cs = json.loads(coldstart.read_text()) if coldstart.exists() else {}
    lines = [
        "# lopd demo", "",
        (f"Model {config.model.name} (LoRA warm start = \"vanilla\"), ToolWorld, "
         f"{config.optim.steps} LOPD steps x {config.optim.tasks_per_step} tasks x "
         f"{config.optim.group_size} rollouts; wall time {seconds / 60:.1f} min."), "",
        f"| held-out ToolWorld ({before['n']} tasks) | success | mean reward |", "|---|---|---|",
        f"| vanilla (warm start) | {before['success']:.3f} | {before['reward']:.3f} |",
        f"| after LOPD | {after['success']:.3f} | {after['reward']:.3f} |", "",
    ]
    if "heldout_nll_context" in cs:
        lines += [(f"Cold start: held-out teacher NLL per action token "
                   f"{cs['heldout_nll_no_context']:.3f} without latent context, "
                   f"{cs['heldout_nll_context']:.3f} with it."), ""]
    lines += ["![reward curve](reward_curve.png)", "",
              f"Metrics: `{trainer.metrics_path}`; checkpoints under `{trainer.out / 'checkpoints'}`."]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
